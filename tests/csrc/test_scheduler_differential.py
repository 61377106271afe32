"""deepinfer._C.Scheduler against the pure-Python model (scheduler_model.py), op by op.

Randomized: arrivals with random prompt lengths and image spans, structured-output requests,
single-rank steps, deferred and out-of-order commits (stale epochs), random finishes, aborts,
caller finishes, sample preparation, tiny block counts that force preemption, and bad calls.
After every operation both sides must agree exactly and the invariants must hold.
"""

import random

import numpy as np
import pytest
from scheduler_harness import (
    check_cache,
    check_plan,
    compare_state,
    make_pair,
    sample_args,
    snapshot,
)
from scheduler_model import COMPLETION, NORMAL, PROMPT

NUM_SEEDS = 96
OPS_PER_SEED = 260


def outcome(fn, *args, **kw):
    try:
        return fn(*args, **kw), None
    except (ValueError, RuntimeError) as e:
        return None, type(e)


def random_config(rng: random.Random) -> dict:
    bs = rng.choice([1, 2, 4, 8])
    max_model_len = rng.randint(8, 80)
    tiny = rng.random() < 0.5  # few blocks: preemption and admission refusals
    longest = -(-(max_model_len + 3) // bs) + 2  # blocks of one max-length sequence + reserve
    num_blocks = longest + (rng.randint(0, 4) if tiny else rng.randint(10, 60))
    mode = rng.choices([NORMAL, PROMPT, COMPLETION], [8, 1, 1])[0]
    return dict(
        block_size=bs,
        num_blocks=num_blocks,
        num_state_slots=rng.randint(3, 12),
        max_model_len=max_model_len,
        max_num_seqs=rng.randint(2, 10),
        max_num_batched_tokens=rng.randint(4, 48),
        prefill_chunk_size=rng.randint(2, 24),
        mode=mode,
        prefill_watermark=rng.choice([0.5, 0.9, 1.0]),
        vote_interval_steps=rng.choice([0, 1, 2, 3]),
        lookahead_tokens=rng.choice([0, 0, 1, 3]),
        decode_buckets=sorted(rng.sample(range(1, 10), rng.randint(0, 4))),
        prefill_token_buckets=sorted(rng.sample(range(1, 64), rng.randint(0, 4))),
    )


def random_spans(rng: random.Random, prompt_len: int) -> list[tuple[int, int]]:
    spans, pos = [], 0
    while rng.random() < 0.5 and pos < prompt_len - 1:
        b = rng.randint(pos, prompt_len - 1)
        e = rng.randint(b + 1, min(prompt_len, b + 30))
        spans.append((b, e))
        pos = e
    if rng.random() < 0.05:
        spans.reverse()  # unsorted: an error on both sides when there are two
    return spans


def run_seed(seed: int, weights=(5, 6, 5, 1, 1, 2, 2)) -> dict[str, int]:
    rng = random.Random(seed)
    kw = random_config(rng)
    cpp, py = make_pair(**kw)
    stats = dict.fromkeys(
        ["ops", "errors", "prefill", "decode", "preempted", "dropped", "forks"], 0
    )
    spans: dict[int, list[tuple[int, int]]] = {}
    uncommitted = []  # model plans of steps not committed yet
    next_id = 0
    lookahead = kw["lookahead_tokens"]

    def pick_id() -> int:
        ids = sorted(py.reqs)
        return rng.choice(ids) if ids and rng.random() < 0.85 else rng.randint(0, next_id + 2)

    for _ in range(OPS_PER_SEED):
        op = rng.choices(["add", "step", "commit", "abort", "finish", "sample", "fork"], weights)[0]
        if op == "add":
            sid = next_id if rng.random() < 0.95 else pick_id()
            plen = rng.randint(1, kw["max_model_len"] // 3)
            new = rng.randint(1, max(1, min(40, kw["max_model_len"] - plen)))
            if rng.random() < 0.1:  # maybe too long for max_model_len or the cache, or empty
                plen, new = rng.randint(0, 99), rng.randint(0, 40)
            sp = random_spans(rng, plen)
            so = rng.random() < 0.2
            samp = (
                rng.choice([0.0, 0.7, 1.0]),
                rng.choice([0.5, 1.0]),
                rng.choice([0, 5]),
                rng.choice([0.0, 0.1]),
                rng.choice([-1, 7]),
            )
            if rng.random() < 0.03:
                samp = (-1.0, *samp[1:])  # invalid temperature
            sampling = dict(
                zip(["temperature", "top_p", "top_k", "min_p", "seed"], samp, strict=True)
            )
            a = outcome(cpp.add_request, sid, plen, new, sp, so, **sampling)
            b = outcome(py.add_request, sid, plen, new, sp, so, samp)
            if a[1] is None:
                spans[sid] = sp
                next_id = max(next_id, sid) + 1
        elif op == "step":
            a = (snapshot(cpp.schedule()), None)
            b = (py.schedule(), None)
            check_plan(a[0], cpp, spans)
            uncommitted.append(b[0])
            stats["prefill" if b[0].phase else "decode"] += bool(b[0].rows)
            stats["preempted"] += len(b[0].preempted)
        elif op == "commit":
            if not uncommitted or rng.random() < 0.03:
                sid = rng.randint(0, 5) + (uncommitted[-1].step_id + 1 if uncommitted else 0)
                args = (sid, np.ones(0, np.int32))
                a, b = outcome(cpp.commit, *args), outcome(py.commit, *args)
            else:
                # usually the oldest step; sometimes a later one (deferred / out of order)
                plan = uncommitted.pop(0 if rng.random() < 0.8 else rng.randrange(len(uncommitted)))
                hi = 1 if plan.phase else 1 + lookahead
                acc = np.array([rng.randint(1, hi) for _ in plan.rows], np.int32)
                if plan.rows and rng.random() < 0.02:
                    acc[0] = hi + 1  # out of range: rejected unless the row is stale
                fin = np.array([rng.random() < 0.05 for _ in plan.rows], bool)
                a = outcome(cpp.commit, plan.step_id, acc, fin)
                b = outcome(py.commit, plan.step_id, acc.tolist(), fin.tolist())
                if a[1] is not None:
                    uncommitted.insert(0, plan)
                    acc[:] = 1  # retry valid so the step does not leak
                    a = outcome(cpp.commit, plan.step_id, acc, fin)
                    b = outcome(py.commit, plan.step_id, acc.tolist(), fin.tolist())
                    uncommitted.pop(0)
                stats["dropped"] += len(a[0] or [])
            assert cpp.take_finished() == py.take_finished()
        elif op == "fork":
            # a decoding sequence with nothing in flight, usually; any id sometimes (errors)
            ready = [i for i in py.running if not py.reqs[i].num_pending]
            parent = rng.choice(ready) if ready and rng.random() < 0.9 else pick_id()
            child = next_id if rng.random() < 0.95 else pick_id()
            seed_arg = rng.choice([None, 3])
            a = outcome(cpp.fork, parent, child, seed_arg)
            b = outcome(py.fork, parent, child, seed_arg)
            if a[1] is None:
                spans[child] = spans[parent]
                next_id = max(next_id, child) + 1
                stats["forks"] += 1
        elif op in ("abort", "finish"):
            sid = pick_id()
            a, b = outcome(getattr(cpp, op), sid), outcome(getattr(py, op), sid)
        else:
            plan = uncommitted[-1] if uncommitted else None
            if plan is None or not plan.rows:
                continue
            args = sample_args(plan)
            if rng.random() < 0.1:
                args[2][-1] = not args[2][-1]  # mixed batch when there are >= 2 rows
            if rng.random() < 0.05:
                args[4][0] = kw["max_model_len"] + 1
            a = outcome(cpp.prepare_sample, *args)
            b = outcome(py.prepare_sample, *args)
            if a[1] is None:
                m = a[0]
                a = (
                    (
                        m.temperature.tolist(),
                        m.top_p.tolist(),
                        m.top_k.tolist(),
                        m.min_p.tolist(),
                        m.seeds.tolist(),
                        m.offsets.tolist(),
                        m.logits_index.tolist(),
                        m.num_stale,
                    ),
                    None,
                )
                dtypes = ["f4", "f4", "i4", "f4", "i8", "i8", "i4"]
                cols = [np.asarray(c, d).tolist() for c, d in zip(b[0][:7], dtypes, strict=True)]
                b = ((*cols, b[0][7]), None)
        assert a == b, f"seed {seed}: {op} diverged:\n C++   {a}\n model {b}"
        stats["ops"] += 1
        stats["errors"] += a[1] is not None
        stats[f"errors_{op}"] = stats.get(f"errors_{op}", 0) + (a[1] is not None)
        py.bm.check_integrity()
        check_cache(cpp)
        compare_state(cpp, py)
    # drain: commit everything, abort everything; the cache returns to empty
    for plan in uncommitted:
        acc = np.ones(len(plan.rows), np.int32)
        assert cpp.commit(plan.step_id, acc) == py.commit(plan.step_id, acc.tolist())
    for sid in sorted(py.reqs):
        cpp.abort(sid)
        py.abort(sid)
    assert cpp.num_free_blocks() == kw["num_blocks"] - 1
    assert cpp.num_free_state_slots() == kw["num_state_slots"] - 1
    return stats


def test_differential_random_ops():
    total: dict[str, int] = {}
    for seed in range(NUM_SEEDS):
        for k, v in run_seed(seed).items():
            total[k] = total.get(k, 0) + v
    assert total["ops"] >= 10_000
    # the interesting paths were exercised, not only the happy one
    assert total["errors"] > 200
    assert total["prefill"] > 500 and total["decode"] > 500
    assert total["preempted"] > 50
    assert total["dropped"] > 50
    assert total["forks"] > 50


@pytest.mark.parametrize("seed", [1000, 1001])
def test_differential_long_run(seed):
    """Few arrivals, few aborts and many steps: sequences run to completion."""
    stats = run_seed(seed, weights=(2, 8, 8, 0, 0, 1, 0))
    assert stats["decode"] > 40
