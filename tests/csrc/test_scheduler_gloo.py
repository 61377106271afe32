"""The phase vote over real processes: 3 ranks, torch.distributed with gloo (file store), each
rank with its own random arrivals; every rank must choose the same phase at every step."""

import json
import random

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from deepinfer import _C

WORLD = 3
STEPS = 60


def _rank_main(rank: int, store: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        rng = random.Random(100 + rank)
        s = _C.Scheduler(
            _C.SchedulerConfig(
                block_size=4,
                num_blocks=24 + 8 * rank,
                num_state_slots=5,
                max_model_len=64,
                max_num_seqs=3,
                max_num_batched_tokens=12,
                prefill_chunk_size=8,
                vote_interval_steps=4,
                decode_buckets=[1, 2, 4],
            )
        )

        def allreduce_max(values: list[int]) -> list[int]:
            t = torch.tensor(values, dtype=torch.int64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return t.tolist()

        record, prev = [], None
        for i in range(STEPS):
            if rng.random() < 0.15 * (rank + 1):  # skewed arrivals: rank 2 busiest
                s.add_request(i, rng.randint(1, 40), rng.randint(1, 8))
            local = s.vote1_local()
            plan = s.schedule(allreduce_max)
            record.append([int(plan.phase), local, plan.num_rows])
            if prev is not None:
                s.commit(prev[0], np.ones(prev[1], np.int32))
            prev = (plan.step_id, plan.num_rows)
        with open(f"{out_dir}/rank{rank}.json", "w") as f:
            json.dump(record, f)
    finally:
        dist.destroy_process_group()


def test_vote_over_gloo_processes(tmp_path):
    # fork: the children reuse this process's imported torch (spawn re-imports it: seconds each)
    mp.start_processes(
        _rank_main,
        args=(str(tmp_path / "store"), str(tmp_path)),
        nprocs=WORLD,
        join=True,
        start_method="fork",
    )
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    phases = [[step[0] for step in rec] for rec in records]
    assert phases[0] == phases[1] == phases[2], "ranks chose different phases"
    prefill = int(_C.Phase.PREFILL)
    assert prefill in phases[0] and int(_C.Phase.DECODE) in phases[0]
    for i, phase in enumerate(phases[0]):
        if phase == prefill:  # some rank had work and (through vote 2) admitted it
            assert any(rec[i][2] > 0 for rec in records)
