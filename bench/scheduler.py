"""Scheduler + sample preparation cost of one decode step: C++ (deepinfer._C) vs the Python model.

256 running sequences of 4K context each (prefilled through the scheduler itself, then in decode).
Each iteration: schedule() (phase vote, decode ordering, block growth, incremental block tables)
+ prepare_sample() over the plan's rows are timed; commit() of one token per row then advances
the state outside the timed region (so the next step is a realistic one). Prints a table and,
last, `scheduler_us=<float> python_us=<float> speedup=<float>` (medians, microseconds).

Run: python bench/scheduler.py [--iters N]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "csrc"))
from scheduler_model import Config, ModelScheduler  # noqa: E402

from deepinfer import _C  # noqa: E402

NUM_SEQS, CONTEXT, BLOCK = 256, 4096, 64
CONFIG = dict(
    block_size=BLOCK,
    num_blocks=NUM_SEQS * (8192 // BLOCK) + 2,
    num_state_slots=NUM_SEQS + 1,
    max_model_len=8192,
    max_num_seqs=NUM_SEQS,
    max_num_batched_tokens=65536,
    prefill_chunk_size=8192,
    decode_buckets=[1, 2, 4, 8, 16, 32, 64, 128, 256],
    prefill_token_buckets=[8192, 16384, 32768, 65536],
)


def fill(s) -> int:
    """Adds the sequences, prefills them; returns the id of the first (uncommitted) decode step."""
    for i in range(NUM_SEQS):
        s.add_request(i, CONTEXT, 8192 - CONTEXT)
    while True:
        p = s.schedule()
        if int(p.phase) == int(_C.Phase.DECODE):  # the model's phases are plain ints
            return p.step_id
        num_rows = len(p.rows) if isinstance(s, ModelScheduler) else p.num_rows
        s.commit(p.step_id, np.ones(num_rows, np.int32))


def bench_cpp(iters: int) -> tuple[list[float], list[float]]:
    s = _C.Scheduler(_C.SchedulerConfig(**CONFIG))
    prev, step_us, commit_us = fill(s), [], []
    ones = np.ones(NUM_SEQS, np.int32)
    for _ in range(iters):
        t0 = time.perf_counter()
        p = s.schedule()
        m = s.prepare_sample(p.seq_ids, p.epochs, p.is_prefill, p.num_tokens, p.seq_lens)
        t1 = time.perf_counter()
        assert p.num_rows == NUM_SEQS and m.num_rows == NUM_SEQS
        step_id = p.step_id
        t2 = time.perf_counter()
        s.commit(prev, ones)  # zero-overhead order: commit step t-1 after scheduling step t
        t3 = time.perf_counter()
        prev = step_id
        step_us.append((t1 - t0) * 1e6)
        commit_us.append((t3 - t2) * 1e6)
    return step_us, commit_us


def bench_python(iters: int) -> tuple[list[float], list[float]]:
    s = ModelScheduler(Config(**CONFIG))
    prev, step_us, commit_us = fill(s), [], []
    ones = [1] * NUM_SEQS
    for _ in range(iters):
        t0 = time.perf_counter()
        p = s.schedule()
        ids = [r[0] for r in p.rows]
        epochs = [r[1] for r in p.rows]
        qlens = [r[3] for r in p.rows]
        lens = [r[2] + r[3] for r in p.rows]
        s.prepare_sample(ids, epochs, [False] * len(ids), qlens, lens)
        t1 = time.perf_counter()
        assert len(p.rows) == NUM_SEQS
        s.commit(prev, ones)
        t2 = time.perf_counter()
        prev = p.step_id
        step_us.append((t1 - t0) * 1e6)
        commit_us.append((t2 - t1) * 1e6)
    return step_us, commit_us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=2000, help="C++ iterations (Python: iters/40)")
    args = ap.parse_args()
    cpp_step, cpp_commit = bench_cpp(args.iters)
    py_step, py_commit = bench_python(max(10, args.iters // 40))
    med = statistics.median
    print(f"{NUM_SEQS} decode rows x {CONTEXT} context, block {BLOCK}; medians in microseconds")
    print(f"{'':10s} {'schedule+prepare_sample':>24s} {'commit (outside)':>17s} {'iters':>6s}")
    print(f"{'C++':10s} {med(cpp_step):24.1f} {med(cpp_commit):17.1f} {len(cpp_step):6d}")
    print(f"{'Python':10s} {med(py_step):24.1f} {med(py_commit):17.1f} {len(py_step):6d}")
    print(f"C++ p90 schedule+prepare_sample: {statistics.quantiles(cpp_step, n=10)[-1]:.1f} us")
    speedup = med(py_step) / med(cpp_step)
    print(f"scheduler_us={med(cpp_step):.2f} python_us={med(py_step):.2f} speedup={speedup:.1f}")


if __name__ == "__main__":
    main()
