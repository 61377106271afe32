"""The two-stage DP phase vote: 1-8 simulated ranks in one process (C++ and model side by side),
and the schedule(allreduce_max) convenience path driven by threads."""

import random
import threading

import numpy as np
from scheduler_harness import make_pair, snapshot
from scheduler_model import DECODE, PREFILL

from deepinfer import _C


def rank_config(rng: random.Random) -> dict:
    return dict(
        block_size=4,
        num_blocks=rng.randint(12, 40),
        num_state_slots=rng.randint(3, 8),
        max_model_len=40,
        max_num_seqs=rng.randint(2, 6),
        max_num_batched_tokens=rng.randint(8, 32),
        prefill_chunk_size=rng.randint(4, 16),
        prefill_watermark=rng.choice([0.3, 0.9]),
        vote_interval_steps=rng.choice([0, 2, 3]),
        decode_buckets=[1, 2, 4, 8],
    )


def test_simulated_ranks_agree_on_phase():
    steps_checked = prefill_steps = empty_prefill_ranks = 0
    for seed in range(40):
        rng = random.Random(seed)
        num_ranks = rng.randint(1, 8)
        base = rank_config(rng)
        # ranks share the vote rule (vote_interval_steps); their limits and arrivals differ
        ranks = []
        for _ in range(num_ranks):
            kw = rank_config(rng)
            kw["vote_interval_steps"] = base["vote_interval_steps"]
            ranks.append(make_pair(**kw))
        next_id = [0] * num_ranks
        inflight: list[list] = [[] for _ in range(num_ranks)]
        for _ in range(60):
            for r, (cpp, py) in enumerate(ranks):
                for _ in range(rng.choice([0, 0, 0, 1, 2])):  # skewed random arrivals
                    plen, new = rng.randint(1, 24), rng.randint(1, 12)
                    cpp.add_request(next_id[r], plen, new)
                    py.add_request(next_id[r], plen, new)
                    next_id[r] += 1
            votes = [cpp.vote1_local() for cpp, _ in ranks]
            assert votes == [py.vote1_local() for _, py in ranks]
            all_flag, any_flag = min(votes), max(votes)
            admitted = [cpp.apply_vote1(all_flag, any_flag) for cpp, _ in ranks]
            assert admitted == [py.apply_vote1(all_flag, any_flag) for _, py in ranks]
            any_admitted = max(admitted)
            plans = []
            for r, (cpp, py) in enumerate(ranks):
                a = snapshot(cpp.finish_step(any_admitted))
                b = py.finish_step(any_admitted)
                assert a == b
                plans.append(a)
                inflight[r].append(a)
            phases = {p.phase for p in plans}
            assert len(phases) == 1, "ranks chose different phases"
            if not any_admitted:
                assert phases == {DECODE}, "a step where no rank admitted became PREFILL"
            else:
                assert phases == {PREFILL}
                prefill_steps += 1
                empty_prefill_ranks += sum(not p.rows for p in plans)
            steps_checked += 1
            for r, (cpp, py) in enumerate(ranks):  # zero-overhead: commit the previous step
                while len(inflight[r]) > 1:
                    plan = inflight[r].pop(0)
                    acc = np.ones(len(plan.rows), np.int32)
                    fin = np.array([rng.random() < 0.1 for _ in plan.rows], bool)
                    assert cpp.commit(plan.step_id, acc, fin) == py.commit(
                        plan.step_id, acc.tolist(), fin.tolist()
                    )
                    assert cpp.take_finished() == py.take_finished()
    assert steps_checked == 40 * 60
    assert prefill_steps > 200
    assert empty_prefill_ranks > 20  # ranks that admitted nothing ran an empty prefill batch


def test_schedule_with_injected_allreduce_threads():
    """schedule(allreduce_max) on 4 ranks in threads with a barrier-based all-reduce."""
    num_ranks, num_steps = 4, 80
    barrier = threading.Barrier(num_ranks)
    slots: list[list[int]] = [[] for _ in range(num_ranks)]
    phases: list[list] = [[] for _ in range(num_ranks)]
    admitted: list[list[int]] = [[] for _ in range(num_ranks)]
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            rng = random.Random(rank)
            s = _C.Scheduler(
                _C.SchedulerConfig(
                    block_size=4,
                    num_blocks=32,
                    num_state_slots=6,
                    max_model_len=64,
                    max_num_seqs=4,
                    max_num_batched_tokens=16,
                    prefill_chunk_size=8,
                    vote_interval_steps=3,
                )
            )
            calls = []

            def allreduce_max(values: list[int]) -> list[int]:
                slots[rank] = list(values)
                barrier.wait()
                out = [max(col) for col in zip(*slots, strict=True)]
                barrier.wait()
                calls.append(values)
                return out

            prev = None
            for i in range(num_steps):
                if rng.random() < 0.2 * (rank + 1) / num_ranks:
                    s.add_request(i, rng.randint(1, 30), rng.randint(1, 10))
                calls.clear()
                plan = s.schedule(allreduce_max)
                phases[rank].append(plan.phase)
                assert len(calls) == 2  # vote 1, then vote 2
                admitted[rank].append(calls[1][0])  # this rank's vote-2 value
                if prev is not None:
                    s.commit(prev[0], np.ones(prev[1], np.int32))
                prev = (plan.step_id, plan.num_rows)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(num_ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert all(p == phases[0] for p in phases), "ranks chose different phases"
    assert _C.Phase.PREFILL in phases[0] and _C.Phase.DECODE in phases[0]
    for i, phase in enumerate(phases[0]):
        some_rank_admitted = any(admitted[r][i] for r in range(num_ranks))
        assert (phase == _C.Phase.PREFILL) == some_rank_admitted
