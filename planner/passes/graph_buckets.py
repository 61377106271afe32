"""CUDA-graph shapes: the decode batch sizes to capture, and the token counts of prefill steps.

A step with ``b`` sequences runs the smallest captured size ``>= b``; the padding lanes are
wasted work. The bound: padding waste ``(bucket - b) / bucket <= MAX_PADDING_WASTE = 1/8`` for
every ``b`` in ``1..max batch``. Buckets are built greedily from 1: the next bucket is
``prev + s`` for the largest power of two ``s`` with ``8 * (s - 1) <= prev + s``; the worst
batch in that bucket, ``prev + 1``, wastes ``(s - 1) / (prev + s) <= 1/8``. Small batches get
every size (1..6), large ones steps of about an eighth (36 graphs for 256 sequences). The max
batch itself is always a bucket. Graphs share one memory pool, so more of them cost capture
time, not memory.

With DSpark every decode step verifies ``1 + num_draft_tokens`` rows per sequence, so the
``verify`` graphs have ``b * (1 + draft)`` rows for each decode bucket ``b``. Decode rows never
exceed ``max_num_batched_tokens`` (the scheduler caps the batch there).

Prefill steps are not captured (their shapes vary, and they are compute-bound): the prefill
buckets are the workspace / kernel-tile sizes, powers of two from 16 up to and including
``max_num_batched_tokens`` (waste < 50%, acceptable for tiling only).
"""

from __future__ import annotations

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.planner.topology import Topology

__all__ = ["MAX_PADDING_WASTE", "decode_buckets", "padding_waste", "plan_graph_buckets"]

MAX_PADDING_WASTE = 0.125
MIN_PREFILL_BUCKET_TOKENS = 16


def decode_buckets(max_batch: int) -> list[int]:
    """Sorted batch sizes 1..max_batch with padding waste <= 1/8 (module docstring)."""
    sizes = [1]
    while sizes[-1] < max_batch:
        prev, step = sizes[-1], 1
        while 8 * (2 * step - 1) <= prev + 2 * step:
            step *= 2
        sizes.append(min(prev + step, max_batch))
    return sizes


def padding_waste(batch: int, buckets: list[int]) -> float:
    """Fraction of a padded step's rows that are padding: ``(bucket - batch) / bucket``."""
    bucket = next(b for b in buckets if b >= batch)
    return (bucket - batch) / bucket


def plan_graph_buckets(spec: ModelSpec, topo: Topology) -> dict:
    """Returns ``{"decode": [batch sizes], "verify": [rows] (empty without DSpark),
    "prefill_tokens": [token counts], "max_padding_waste": 0.125,
    "decode_padding_waste": worst waste over 1..max decode batch, "rows_per_seq"}``.
    ``spec`` is accepted for the pipeline's uniform signature (DSpark block size checks live in
    ``validate``)."""
    sched = topo.scheduler
    draft = topo.speculative.num_draft_tokens if topo.speculative.method == "dspark" else 0
    rows_per_seq = 1 + draft
    max_batch = min(sched.max_num_seqs, sched.max_num_batched_tokens // rows_per_seq)
    decode: list[int] = []
    if sched.mode != "prompt" and max_batch >= 1:
        decode = decode_buckets(max_batch)
    top = decode[-1] if decode else 0
    worst = max((padding_waste(b, decode) for b in range(1, top + 1)), default=0.0)
    prefill: list[int] = []
    if sched.mode != "completion":
        size = MIN_PREFILL_BUCKET_TOKENS
        while size < sched.max_num_batched_tokens:
            prefill.append(size)
            size *= 2
        prefill.append(sched.max_num_batched_tokens)
    return {
        "decode": decode,
        "verify": [b * rows_per_seq for b in decode] if draft else [],
        "prefill_tokens": prefill,
        "rows_per_seq": rows_per_seq,
        "max_padding_waste": MAX_PADDING_WASTE,
        "decode_padding_waste": worst,
    }
