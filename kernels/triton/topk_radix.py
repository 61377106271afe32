"""Radix-select top-k of the indexer (model-spec §2.6): the decode path of ``topk_positions``.

One program per row; no sort network. Each score maps to a 32-bit unsigned order key
(``_order_key``: the high half of ``topk._pack``'s key, sign bit flipped, -0.0 folded into
+0.0), so larger key = larger score.

* Step 1, radix select: 32 / ``RADIX_BITS`` histogram passes of ``RADIX_BITS`` bits each, high digit
  first, find the k-th largest key ``thr`` among the row's finite scores and ``r``, how many
  entries of key == thr the top-k takes (the rest of the top-k is every key > thr). Each pass
  counts, over the entries whose higher digits equal the prefix found so far, how many have each
  value of the next digit (``tl.histogram``), then takes the largest digit whose suffix count
  reaches the remaining k. A row with fewer finite scores than k ends with thr = 0 (below every
  finite key): all finite entries are taken. A row that reads at most k scores (its visible
  count) skips the passes and starts from thr = 0 (session 31).
* Step 2, compaction: one walk over positions in ascending order writes every position with
  key > thr and the first r with key == thr (ties go to the lower position), at slots given by
  a running prefix sum (``tl.cumsum``): the output is sorted by position without a sort. The
  slots after the last pick get -1 (the reference puts its -inf picks last).

Only entries below min(T, num_visible[row]) are read, so the cost follows the context, not T.
A row that fits one tile (T <= ``RADIX_TILE``) is loaded once and kept in registers; a longer
row is re-read tile by tile in each pass (L2-resident at decode sizes).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import attn_common
from deepinfer.kernels.triton.launch_math import next_power_of_2

RADIX_TILE = 4096  # scores per tile (a row up to this long is loaded once)
RADIX_BITS = 8  # bits per histogram pass: 4 passes of 256 bins (4: 8 passes of 16 bins)
NUM_WARPS = 8


@triton.jit
def _order_key(in_row, i, n):
    """(BT,) positions -> (uint32 order key, is a finite visible score)."""
    s = tl.load(in_row + i, mask=i < n, other=float("-inf"))
    b = (s + 0.0).to(tl.uint32, bitcast=True)  # + 0.0 folds -0.0 into +0.0
    u = tl.where((b >> 31) != 0, b ^ 0xFFFFFFFF, b | 0x80000000)  # < 0: flip all, else the sign
    return u, (i < n) & (s > float("-inf"))


@triton.jit
def _digit_histogram(u, ok, prefix, SHIFT: tl.constexpr, BITS: tl.constexpr):
    """Counts (2**BITS,) of the digit (u >> SHIFT) over entries whose digits above it = prefix's."""
    if SHIFT + BITS < 32:
        ok = ok & ((u >> (SHIFT + BITS)) == (prefix >> (SHIFT + BITS)))
    digit = ((u >> SHIFT) & ((1 << BITS) - 1)).to(tl.int32)
    return tl.histogram(digit, 1 << BITS, mask=ok)


@triton.jit
def _pick_digit(hist, prefix, k_rem, SHIFT: tl.constexpr, BITS: tl.constexpr):
    """The largest digit d whose count of entries >= d reaches k_rem (0 if none does): the new
    prefix and k_rem less the entries above d."""
    bins = tl.arange(0, 1 << BITS)
    at_least = tl.cumsum(hist, 0, reverse=True)  # at_least[d] = #entries with digit >= d
    d = tl.maximum(tl.sum((at_least >= k_rem).to(tl.int32), 0) - 1, 0)
    above = tl.sum(tl.where(bins > d, hist, 0), 0)
    return prefix | (d.to(tl.uint32) << SHIFT), k_rem - above


@triton.jit
def _compact(u, ok, i, thr, r, eq_seen, taken, out_row):
    """Store the tile's picks (key > thr, or key == thr among the first r such) at slots
    taken, taken + 1, ... in position order; returns the updated (eq_seen, taken)."""
    eq = ok & (u == thr)
    eq_rank = eq_seen + tl.cumsum(eq.to(tl.int32), 0) - 1
    pick = (ok & (u > thr)) | (eq & (eq_rank < r))
    slot = taken + tl.cumsum(pick.to(tl.int32), 0) - 1
    tl.store(out_row + slot, i.to(tl.int64), mask=pick)
    return eq_seen + tl.sum(eq.to(tl.int32), 0), taken + tl.sum(pick.to(tl.int32), 0)


@triton.jit
def _radix_topk_kernel(
    in_ptr, stride_in, length, vis_ptr, out_ptr, stride_out, k_out,
    BT: tl.constexpr, BITS: tl.constexpr, PASSES: tl.constexpr, ONE_TILE: tl.constexpr,
    HAS_VIS: tl.constexpr,
):
    """Row ``program_id(0)``: out[row, :k_out] = its top-k_out positions ascending, then -1s."""
    in_row, out_row, n = _row_of(in_ptr, stride_in, length, vis_ptr, out_ptr, stride_out,
                                 HAS_VIS)
    offs = tl.arange(0, BT)
    if ONE_TILE:
        u0, ok0 = _order_key(in_row, offs, n)
    # Step 1: radix select of the k_out-th largest finite key — unless the row reads at most
    # k_out scores (a prompt's early queries: at 4K tokens a quarter to a half of the rows):
    # then thr = 0 takes every finite one, what the passes would find
    prefix = tl.zeros((), tl.uint32)
    k_rem = k_out + tl.zeros((), tl.int32)
    if n > k_out:
        for p in tl.static_range(PASSES):
            if ONE_TILE:
                hist = _digit_histogram(u0, ok0, prefix, 32 - BITS * (p + 1), BITS)
            else:
                hist = tl.zeros((1 << BITS,), tl.int32)
                for start in range(0, n, BT):
                    u, ok = _order_key(in_row, start + offs, n)
                    hist += _digit_histogram(u, ok, prefix, 32 - BITS * (p + 1), BITS)
            prefix, k_rem = _pick_digit(hist, prefix, k_rem, 32 - BITS * (p + 1), BITS)
    # Step 2: compaction in position order
    eq_seen = tl.zeros((), tl.int32)
    taken = tl.zeros((), tl.int32)
    if ONE_TILE:
        eq_seen, taken = _compact(u0, ok0, offs, prefix, k_rem, eq_seen, taken, out_row)
    else:
        for start in range(0, n, BT):
            u, ok = _order_key(in_row, start + offs, n)
            eq_seen, taken = _compact(u, ok, start + offs, prefix, k_rem, eq_seen, taken,
                                      out_row)
    _fill_unpicked(out_row, taken, k_out, offs, BT)


@triton.jit
def _row_of(in_ptr, stride_in, length, vis_ptr, out_ptr, stride_out, HAS_VIS: tl.constexpr):
    """Program ``program_id(0)``'s row: (its scores, its output row, the scores it reads: the
    row's num_visible clamped to [0, length] when HAS_VIS, else length)."""
    row = tl.program_id(0).to(tl.int64)
    n = length
    if HAS_VIS:  # scores at or beyond num_visible are -inf: not read
        n = tl.minimum(tl.maximum(tl.load(vis_ptr + row), 0), length).to(tl.int32)
    return in_ptr + row * stride_in, out_ptr + row * stride_out, n


@triton.jit
def _fill_unpicked(out_row, taken, k_out, offs, BT: tl.constexpr):
    """Slots [taken, k_out) of the output row (after the last pick): -1."""
    for start in range(0, k_out, BT):
        j = start + offs
        tl.store(out_row + j, tl.full((BT,), -1, tl.int64), mask=(j >= taken) & (j < k_out))


def launch_meta(num_entries: int, has_vis: bool) -> dict[str, Any]:
    """Constexprs and launch options for rows of ``num_entries`` scores (shared with the SM90
    compile test)."""
    if 32 % RADIX_BITS:
        raise ValueError(f"topk_radix: RADIX_BITS={RADIX_BITS} must divide 32")
    # at least one score per thread (a GPU tile is never smaller than 32 * NUM_WARPS)
    bt = min(RADIX_TILE, max(32 * NUM_WARPS, next_power_of_2(num_entries)))
    return dict(BT=bt, BITS=RADIX_BITS, PASSES=32 // RADIX_BITS, ONE_TILE=num_entries <= bt,
                HAS_VIS=has_vis, num_warps=NUM_WARPS, num_stages=1)


def positions_out(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The (N, min(k, T)) int64 output of a position top-k of (N, T) ``scores`` (both paths);
    ValueError unless the score rows are contiguous."""
    n, t = scores.shape
    if n and min(k, t) and scores.stride(-1) != 1:
        raise ValueError("topk_positions: score rows must be contiguous")
    return attn_common.alloc((n, min(k, t)), torch.int64, scores.device)


def topk_positions_radix(scores: torch.Tensor, k: int,
                         num_visible: torch.Tensor | None = None) -> torch.Tensor:
    """Same contract as ``reference.indexer.topk_positions``: (N, T) fp32 scores (rows
    contiguous) -> (N, min(k, T)) int64 positions ascending, then -1 for picks with a -inf
    score. ``num_visible`` (N,) int: every score at or beyond it is -inf (not read). One
    launch, grid (N,), no host sync."""
    return launch_rows(_radix_topk_kernel, launch_meta, scores, k, num_visible)


def launch_rows(kernel, meta_of, scores: torch.Tensor, k: int,
                num_visible: torch.Tensor | None) -> torch.Tensor:
    """The host side of a one-program-per-row position top-k (this module's kernel and
    ``topk_bisect``'s share the signature): the output, the launch at ``meta_of(T, has_vis)``."""
    out = positions_out(scores, k)
    (n, k_out), t = out.shape, scores.shape[1]
    if out.numel() == 0:
        return out
    meta = meta_of(t, num_visible is not None)
    vis = out if num_visible is None else num_visible.to(torch.int64).contiguous()
    kernel[(n,)](scores, scores.stride(0), t, vis, out, out.stride(0), k_out, **meta)
    return out


def aot_cases() -> list[dict[str, Any]]:
    types = {"in_ptr": "*fp32", "vis_ptr": "*i64", "out_ptr": "*i64"}
    return [
        dict(name="radix topk one tile 1024", module=__name__, kernel="_radix_topk_kernel",
             types=types, meta=launch_meta(1024, True)),
        dict(name="radix topk tiles of 4096", module=__name__, kernel="_radix_topk_kernel",
             types=types, meta=launch_meta(32768, True)),
        dict(name="radix topk tiles of 4096 no vis", module=__name__,
             kernel="_radix_topk_kernel", types=types, ci=False,
             meta=launch_meta(32768, False)),
        dict(name="radix topk 4-bit digits one tile 1024", module=__name__,
             kernel="_radix_topk_kernel", types=types, ci=False,
             meta=dict(launch_meta(1024, True), BITS=4, PASSES=8, num_warps=4)),
    ]
