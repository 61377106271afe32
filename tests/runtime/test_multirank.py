"""Multi-rank replay (DP 2 x EP 2 over gloo on CPU) against the single-rank plan.

Oracle: ``deepinfer-run`` on the one-rank ``tiny-cpu`` plan (same model, same synthetic
weights). The ``tiny-cpu-dp2-ep2`` plan must give every request the same greedy tokens,
exactly: the EP MoE combines expert outputs in the reference's order (``model/moe.py``) and
every reference op is independent of the batch shape, so neither the DP split nor the EP
exchange may change a token.

Idle ranks: the odd lines of PROMPTS (rank 1's share, line index % 2) stop after one token while
the even lines (rank 0's) run for MAX_TOKENS, so rank 1 has no request for most of the run. Each
of rank 0's later steps runs the EP exchange in every MoE layer, which only completes when rank 1
joins with an idle forward: a missing one hangs (caught by the timeout), an extra one too. The
resume run leaves one even line to do, so rank 1 has no request at all from the start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from host_sync import no_host_sync

from deepinfer.artifacts.plan_dir import write_plan
from deepinfer.artifacts.plan_schema import PlanError
from deepinfer.planner.compile import compile_plan
from deepinfer.planner.report import render_report
from deepinfer.planner.topology_schema import load_topology
from deepinfer.runtime.cli import main as run_main
from deepinfer.runtime.model.moe import MoE
from deepinfer.runtime.plan_loader import load_runtime_plan
from deepinfer.runtime.shard_loader import load_rank_model
from deepinfer.runtime.weights import write_checkpoint
from deepinfer.runtime.weights.shards import INDEX_FILE

NUM_PROMPTS = 8
MAX_TOKENS = 8
TIMEOUT_S = 180
RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def compile_to(out, topology):
    p = compile_plan(load_topology(topology))
    write_plan(out, p, render_report(p), force=False)
    return out


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    root = tmp_path_factory.mktemp("plans")
    return {name: compile_to(root / name, f"builtin:{name}")
            for name in ("tiny-cpu", "tiny-cpu-dp2-ep2")}


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    g = torch.Generator().manual_seed(5)
    rows = []
    for i in range(NUM_PROMPTS):
        n = int(torch.randint(3, 70, (1,), generator=g))
        rows.append({"id": f"r{i}", "prompt_token_ids": torch.randint(3, 500, (n,),
                                                                      generator=g).tolist(),
                     "max_tokens": 1 if i % 2 else MAX_TOKENS, "temperature": 0})
    path = tmp_path_factory.mktemp("in") / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read_rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def run_cli(args, timeout_s=TIMEOUT_S):
    """``deepinfer-run args`` in a fresh session (no rank environment); kills the whole
    session (launcher and ranks) on timeout. Returns (exit code, stderr, seconds)."""
    env = {k: v for k, v in os.environ.items() if k not in RANK_ENV}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "deepinfer.runtime.cli", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"deepinfer-run {args} hung for {timeout_s} s")
    return proc.returncode, err, time.monotonic() - t0


@pytest.fixture(scope="module")
def oracle(plans, prompts, tmp_path_factory):
    out = tmp_path_factory.mktemp("oracle") / "out.jsonl"
    assert run_main([str(plans["tiny-cpu"]), "--input", str(prompts), "--output", str(out)]) == 0
    return {r["id"]: r for r in read_rows(out)}


@pytest.fixture(scope="module")
def dp2_run(plans, prompts, tmp_path_factory):
    out = tmp_path_factory.mktemp("dp2") / "out.jsonl"
    code, err, _ = run_cli([plans["tiny-cpu-dp2-ep2"], "--input", prompts, "--output", out])
    return code, err, out


def assert_same_as_oracle(rows, oracle, ids):
    assert sorted(r["id"] for r in rows) == sorted(ids)  # every id exactly once
    for r in rows:
        want = oracle[r["id"]]
        assert (r["token_ids"], r["finish_reason"]) == (want["token_ids"], want["finish_reason"])


def test_dp2_ep2_equals_single_rank_with_an_idle_rank(dp2_run, oracle):
    code, err, out = dp2_run
    assert code == 0, err
    assert_same_as_oracle(read_rows(out), oracle, list(oracle))
    assert f"done: {NUM_PROMPTS}/{NUM_PROMPTS} requests" in err and "Traceback" not in err
    # rank 0 decoded for a while after rank 1's one-token requests were done
    assert max(len(oracle[f"r{i}"]["token_ids"]) for i in range(0, NUM_PROMPTS, 2)) > 3


def test_resume_with_a_rank_that_has_no_request(dp2_run, oracle, plans, prompts, tmp_path):
    _, _, full = dp2_run
    rows = read_rows(full)
    keep = [r for r in rows if r["id"] != "r4"]  # line 4: rank 0's; rank 1 gets nothing
    out = tmp_path / "out.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in keep) + '{"id": "r4", "tex')  # torn
    code, err, _ = run_cli([plans["tiny-cpu-dp2-ep2"], "--input", prompts, "--output", out,
                            "--resume"])
    assert code == 0, err
    assert_same_as_oracle(read_rows(out), oracle, list(oracle))
    assert "done: 1/1 requests" in err


def test_a_rank_failing_to_start_stops_the_job_with_its_error(tmp_path):
    ckpt = write_checkpoint("builtin:tiny", tmp_path / "ckpt", seed=0, include_dspark=False)
    index = json.loads((ckpt / INDEX_FILE).read_text())
    missing = "layers.3.ffn.experts.5.w2.weight"  # logical expert 5 lives on rank 1 only
    del index["weight_map"][missing]
    (ckpt / INDEX_FILE).write_text(json.dumps(index))
    builtin = Path(load_topology("builtin:tiny-cpu-dp2-ep2").base_dir) / "tiny-cpu-dp2-ep2.yaml"
    topo = tmp_path / "topology.yaml"
    topo.write_text(builtin.read_text().replace("path: builtin:tiny", f"path: {ckpt}")
                    .replace("weights: synthetic", "weights: auto"))
    plan = compile_to(tmp_path / "plan", str(topo))
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "a", "prompt_token_ids": [5, 6, 7], "max_tokens": 2}\n')
    code, err, seconds = run_cli([plan, "--input", inp, "--output", tmp_path / "out.jsonl"],
                                 timeout_s=120)
    assert code == 2, err
    assert f"deepinfer-run (rank 1): checkpoint {ckpt} cannot fill rank 1's model" in err
    assert missing in err and "rank 1 of 2 failed (exit code 2)" in err
    assert seconds < 90


LLM_SCRIPT = """
import json, sys
from deepinfer.runtime.llm import LLM
from deepinfer.runtime.sampling_params import SamplingParams
plan, prompts, out = sys.argv[1:]
llm = LLM(plan)
rows = [json.loads(line) for line in open(prompts)][:4] if llm.dist.rank == 0 else []
outs = llm.generate([r["prompt_token_ids"] for r in rows],
                    [SamplingParams(max_tokens=r["max_tokens"], temperature=0) for r in rows])
json.dump([[r["id"], o.token_ids] for r, o in zip(rows, outs)], open(out, "w"))
"""


def test_llm_per_rank_under_torchrun_environment(plans, prompts, oracle, tmp_path):
    """One LLM per rank as torchrun starts them; generate is collective, rank 1 has no prompt."""
    from deepinfer.runtime.launcher import free_port

    script = tmp_path / "ranks.py"
    script.write_text(LLM_SCRIPT)
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(script), str(plans["tiny-cpu-dp2-ep2"]),
                                       str(prompts), str(tmp_path / f"out{rank}.json")], env=env,
                                      stderr=subprocess.PIPE, text=True))
    try:
        errors = [p.communicate(timeout=TIMEOUT_S)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], errors
    got = json.loads((tmp_path / "out0.json").read_text())
    assert [i for i, _ in got] == ["r0", "r1", "r2", "r3"]
    assert all(tokens == oracle[i]["token_ids"] for i, tokens in got)
    assert json.loads((tmp_path / "out1.json").read_text()) == []


def test_llm_outside_a_rank_process_refuses_naming_the_plan_field(plans, monkeypatch):
    from deepinfer.runtime.llm import LLM

    for key in RANK_ENV:
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(PlanError, match=r"rank_groups\.world_size.*torchrun --nproc-per-node 2"):
        LLM(plans["tiny-cpu-dp2-ep2"])


def test_moe_slots_with_redundant_replicas_equal_the_plain_moe(plans):
    """Slot path without exchange (one rank holding shuffled slots, two logical experts with
    two replicas each) against the plain fused path: bit for bit, replicas used."""
    model = load_rank_model(load_runtime_plan(plans["tiny-cpu"]), 0).model
    plain = model.layers[2].ffn
    phy2log = [3, 0, 5, 1, 2, 7, 3, 4, 6, 5]
    log2phy = [[p for p, e in enumerate(phy2log) if e == x] for x in range(8)]
    logcnt = [len(row) for row in log2phy]
    log2phy = [row + [-1] * (2 - len(row)) for row in log2phy]
    slots = MoE(plain.dim, plain.inter, 8, plain.top_k, plain.route_scale, plain.gate_temp,
                plain.normalize, plain.limit)
    slots.set_slots(0, phy2log, log2phy, logcnt)
    slots.gate, slots.shared_experts = plain.gate, plain.shared_experts
    for j, e in enumerate(phy2log):
        slots.experts[j] = plain.experts[e]
    x = torch.randn(41, plain.dim, generator=torch.Generator().manual_seed(1)).bfloat16()
    ids = plain._route(model.kernels, x, None)[1]
    used = set(slots.physical_slots(ids).flatten().tolist())
    assert {0, 6} <= used or {2, 9} <= used  # some logical expert ran on both its replicas
    assert torch.equal(slots(model.kernels, x, None), plain(model.kernels, x, None))
    with no_host_sync(model) as syncs:  # graph-capturable: no per-slot nonzero
        slots(model.kernels, x, None)
    assert not syncs, syncs


def test_moe_slots_permuted_without_replicas_equal_the_plain_moe(plans):
    """One rank holding every expert once in a permuted order (EPLB's packing on one GPU):
    the slots come from one gather, and the output is the plain path's bit for bit."""
    model = load_rank_model(load_runtime_plan(plans["tiny-cpu"]), 0).model
    plain = model.layers[2].ffn
    phy2log = [5, 2, 7, 0, 1, 6, 3, 4]
    log2phy = [[phy2log.index(e)] for e in range(8)]
    slots = MoE(plain.dim, plain.inter, 8, plain.top_k, plain.route_scale, plain.gate_temp,
                plain.normalize, plain.limit)
    slots.set_slots(0, phy2log, log2phy, [1] * 8)
    assert slots.log2phy is not None  # the slots path, not the plain one
    slots.gate, slots.shared_experts = plain.gate, plain.shared_experts
    for j, e in enumerate(phy2log):
        slots.experts[j] = plain.experts[e]
    x = torch.randn(23, plain.dim, generator=torch.Generator().manual_seed(2)).bfloat16()
    ids = plain._route(model.kernels, x, None)[1]
    assert torch.equal(slots.physical_slots(ids),
                       torch.tensor(log2phy)[ids, 0])  # slot p holds logical phy2log[p]
    assert torch.equal(slots(model.kernels, x, None), plain(model.kernels, x, None))


def test_the_launcher_reports_the_cause_not_the_peer_that_saw_it_die():
    """A rank that fails at start-up (exit 2) can exit after its peer has already failed with 1
    on the closed connection: the launcher waits briefly and reports the cause's code."""
    from deepinfer.runtime import launcher

    def rank(code: int, delay_s: float) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c",
                                 f"import time, sys; time.sleep({delay_s}); sys.exit({code})"])

    assert launcher._wait([rank(1, 0.0), rank(2, 1.0)], grace_s=5.0) == 2
    assert launcher._wait([rank(1, 0.0), rank(1, 0.2)], grace_s=5.0) == 1  # no other cause
