"""Bisection top-k of the indexer (model-spec §2.6) for many short rows: a prefill's queries.

The same contract and output as ``topk_radix`` (positions of a row's k largest finite scores,
ties to the lower position, ascending, then -1), the same order key (``topk_radix._order_key``)
and the same ordered compaction (``topk_radix._compact``); only the select differs:

* ``topk_radix`` finds the k-th largest key by 4 histogram passes of 256 bins. Triton lowers a
  histogram to ballots and popcounts per bin: the sm_90 SASS of a 2,048-score row on 8 warps is
  ~3,200 instructions a thread (878 LOP3, 288 VOTE, 257 POPC) and 52 CTA barriers, and a 4K
  prompt's ratio-2 top-k (4,096 rows x 2,048 scores) took ~257 µs a call on the H200 (round 187:
  1.03 ms for the prompt's 4 calls) — ~30 times its HBM floor.
* Here a row is one warp's (``warps_for``: 2,048 scores a warp) and the k-th largest key is
  built bit by bit from the top: ``thr`` is the largest v with count(key >= v) >= k, i.e. the
  k-th largest key. A step is one compare and add per score and a warp reduction — no shared
  memory, no barrier on one warp — and the loop stops as soon as a candidate's count is exactly
  k (then the k-th largest key is the least key >= that candidate: one min pass). With distinct
  scores that is ~18 of the 32 steps for 2,048 normal scores (the gap between neighbouring
  order statistics spans ~2^14 key units); ties run all 32.

Invalid entries (beyond the row's visible count, -inf or NaN) get key 0, below every finite
score's key (>= 0x007FFFFF), so a row with fewer than k finite scores ends at thr = 0 and takes
them all, as the radix select does. Rows of at most ``MAX_ENTRIES`` scores (one tile, in
registers); ``topk.topk_positions`` and ``topk.select_candidate_blocks`` route rows here from
``MIN_ROWS`` rows up (``takes``).

Shapes: scores (N, T) fp32, rows contiguous, T <= MAX_ENTRIES; num_visible (N,) int64 or None;
out (N, min(k, T)) int64.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import topk_radix
from deepinfer.kernels.triton.launch_math import next_power_of_2
from deepinfer.kernels.triton.topk_radix import _compact, _fill_unpicked, _order_key, _row_of

MAX_ENTRIES = 4096  # scores per row this kernel takes (one register tile)
ENTRIES_PER_WARP = 2048  # a row's warps: its tile / this (at least one)
# rows from which topk.py takes this kernel (a shape-only choice; None: never). Decode's few
# rows keep the radix kernel, whose 8 warps share a row's latency (H100 round 191: at 2,048
# scores bisect is slower below 512 rows, faster from 512).
MIN_ROWS: int | None = 512


@triton.jit
def _bisect_topk_kernel(
    in_ptr, stride_in, length, vis_ptr, out_ptr, stride_out, k_out,
    BT: tl.constexpr, HAS_VIS: tl.constexpr,
):
    """Row ``program_id(0)``: out[row, :k_out] = its top-k_out positions ascending, then -1s."""
    in_row, out_row, n = _row_of(in_ptr, stride_in, length, vis_ptr, out_ptr, stride_out,
                                 HAS_VIS)
    offs = tl.arange(0, BT)
    u, ok = _order_key(in_row, offs, n)
    u = tl.where(ok, u, 0)  # invalid: below every finite score's key
    thr = tl.zeros((), tl.uint32)
    if n > k_out:  # else every finite score is taken (thr = 0)
        prefix = tl.zeros((), tl.uint32)
        step = tl.full((), 0x80000000, tl.uint32)
        while step != 0:
            cand = prefix | step
            count = tl.sum((u >= cand).to(tl.int32), 0)
            prefix = tl.where(count >= k_out, cand, prefix)
            step = tl.where(count == k_out, 0, step >> 1)
        least = tl.min(tl.where(u >= prefix, u, 0xFFFFFFFF), 0)
        thr = tl.where(prefix == 0, 0, least)
    k_rem = k_out - tl.sum((u > thr).to(tl.int32), 0)
    eq_seen = tl.zeros((), tl.int32)
    taken = tl.zeros((), tl.int32)
    eq_seen, taken = _compact(u, u != 0, offs, thr, k_rem, eq_seen, taken, out_row)
    _fill_unpicked(out_row, taken, k_out, offs, BT)


def warps_for(tile: int) -> int:
    """Warps of a row tile of ``tile`` scores: one per ENTRIES_PER_WARP (at least one)."""
    return max(1, tile // ENTRIES_PER_WARP)


def takes(rows: int, num_entries: int) -> bool:
    """Whether ``rows`` rows of ``num_entries`` scores go to this kernel."""
    return MIN_ROWS is not None and rows >= MIN_ROWS and num_entries <= MAX_ENTRIES


def launch_meta(num_entries: int, has_vis: bool) -> dict[str, Any]:
    """Constexprs and launch options for rows of ``num_entries`` (<= MAX_ENTRIES) scores."""
    if num_entries > MAX_ENTRIES:
        raise ValueError(f"topk_bisect: {num_entries} scores a row, at most {MAX_ENTRIES}")
    bt = max(32, next_power_of_2(num_entries))
    return dict(BT=bt, HAS_VIS=has_vis, num_warps=warps_for(bt), num_stages=1)


def aot_cases() -> list[dict[str, Any]]:
    types = {"in_ptr": "*fp32", "vis_ptr": "*i64", "out_ptr": "*i64"}
    return [
        dict(name="bisect topk 2048", module=__name__, kernel="_bisect_topk_kernel",
             types=types, meta=launch_meta(2048, True)),
        dict(name="bisect topk 4096", module=__name__, kernel="_bisect_topk_kernel",
             types=types, meta=launch_meta(4096, True)),
    ]


def topk_positions_bisect(scores: torch.Tensor, k: int,
                          num_visible: torch.Tensor | None = None) -> torch.Tensor:
    """``topk_radix.topk_positions_radix``'s contract and output, by this module's kernel:
    (N, T) fp32 scores (rows contiguous, T <= MAX_ENTRIES) -> (N, min(k, T)) int64 positions
    ascending, then -1. One launch, grid (N,), no host sync."""
    return topk_radix.launch_rows(_bisect_topk_kernel, launch_meta, scores, k, num_visible)
