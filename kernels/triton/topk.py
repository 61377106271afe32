"""Top-k of the indexer (model-spec §2.6): position-sorted top-k and two-level candidate blocks.

Blocked top-k + merge. Each (score, position) pair is packed into one int64 whose order is the
reference order: high 32 bits = the score's fp32 bits mapped to an order-preserving signed int
(-0.0 folded into +0.0), low 32 bits = 0xFFFFFFFF - position, so ties go to the lower position
(``stable_topk``). A stage kernel takes a row's list in tiles of ``BT`` and keeps each tile's
``KP`` largest packed keys (``tl.topk``, sorted); stages repeat over the survivors until one tile
is left (1M scores, k = 512, BT = 4096: 4 stages). A final kernel decodes the survivors:

* ``topk_positions``: the first min(k, T) survivors, -1 for -inf scores, sorted by position;
* ``select_candidate_blocks``: stage 0 reduces each block of ``block_size`` scores to its max and
  pins the block of the newest visible entry to +inf; the final kernel sets the mask of the
  first min(num_blocks, #blocks) surviving blocks whose max is > -inf.

``topk_positions`` takes this stage path for rows longer than ``RADIX_MAX_ENTRIES``; shorter
rows go to ``topk_radix`` (histogram radix select, no sort: decode's few rows) or, many short
rows (a prefill's queries, ``topk_bisect.takes``), to ``topk_bisect`` (one warp a row); the
candidate blocks' radix path routes its block maxima the same way. The host wrappers only
allocate buffers and launch.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import attn_common, topk_bisect, topk_radix
from deepinfer.kernels.triton.attn_common import cuda_sm90
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2

TOPK_TILE = 4096  # scores per stage tile (at least 4 * KP)
# rows up to this many scores take the radix path (one program per row re-reads a longer row
# in every pass, while the stage path spreads it over one program per tile)
RADIX_MAX_ENTRIES = 65536
NUM_WARPS = 8

MODE_SCORES = 0
MODE_PACKED = 2

_NEG_INF_KEY = -2139095041  # order key of -inf: 0xFF800000 ^ 0x7FFFFFFF as int32


@triton.jit
def _pack(score, pos):
    """fp32 score, int position -> int64 key ordered as (score, -position)."""
    b = (score + 0.0).to(tl.int32, bitcast=True)  # + 0.0 folds -0.0 into +0.0
    key = tl.where(b < 0, b ^ 0x7FFFFFFF, b)
    return (key.to(tl.int64) << 32) | (4294967295 - pos.to(tl.int64))


@triton.jit
def _topk_stage_kernel(
    in_ptr, stride_in, length, out_ptr, stride_out, vis_ptr,
    BT: tl.constexpr, KP: tl.constexpr, MODE: tl.constexpr, HAS_VIS: tl.constexpr,
):
    row = tl.program_id(0)
    tile = tl.program_id(1)
    if HAS_VIS:  # a tile wholly at or beyond the row's visible count holds only -inf: no sort
        if tile * BT >= tl.load(vis_ptr + row):
            none = tl.full((KP,), -2147483648, tl.int32).to(tl.int64) << 32
            tl.store(out_ptr + row.to(tl.int64) * stride_out + tile * KP + tl.arange(0, KP),
                     none)
            return
    i = tile * BT + tl.arange(0, BT)
    in_row = in_ptr + row.to(tl.int64) * stride_in
    pad = tl.full((BT,), -2147483648, tl.int32).to(tl.int64) << 32
    if MODE == 0:
        s = tl.load(in_row + i, mask=i < length, other=float("-inf"))
        x = tl.where(i < length, _pack(s, i), pad)
    else:
        x = tl.load(in_row + i, mask=i < length, other=0)
        x = tl.where(i < length, x, pad)
    top = tl.topk(x, KP)  # (KP,) largest first
    tl.store(out_ptr + row.to(tl.int64) * stride_out + tile * KP + tl.arange(0, KP), top)


@triton.jit
def _block_keys_kernel(in_ptr, stride_in, num_scores, vis_ptr, out_ptr, stride_out,
                       num_blocks, BB: tl.constexpr, BS: tl.constexpr,
                       PACKED: tl.constexpr = True):
    """Packed (block max, block index) keys (PACKED), else the fp32 block maxima; the newest
    visible entry's block pinned to +inf."""
    row = tl.program_id(0)
    i = tl.program_id(1) * BB + tl.arange(0, BB)
    e = i[:, None] * BS + tl.arange(0, BS)[None, :]
    in_row = in_ptr + row.to(tl.int64) * stride_in
    nvis = tl.load(vis_ptr + row)  # entries at or beyond it are -inf: not read
    s = tl.max(tl.load(in_row + e, mask=(e < num_scores) & (e < nvis), other=float("-inf")),
               axis=1)
    newest = (nvis - 1) // BS  # nvis = 0 pins nothing (newest = -1)
    s = tl.where((i == newest) & (nvis > 0), float("inf"), s)
    if PACKED:
        tl.store(out_ptr + row.to(tl.int64) * stride_out + i, _pack(s, i), mask=i < num_blocks)
    else:
        tl.store(out_ptr + row.to(tl.int64) * stride_out + i, s, mask=i < num_blocks)


@triton.jit
def _topk_positions_final_kernel(in_ptr, stride_in, out_ptr, stride_out, k_out,
                                 KP: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, KP)
    x = tl.load(in_ptr + row.to(tl.int64) * stride_in + c)  # sorted, largest first
    valid = ((x >> 32) > -2139095041) & (c < k_out)
    pos = 4294967295 - (x & 4294967295)
    big = tl.full((KP,), 9223372036854775807, tl.int64)
    srt = tl.sort(tl.where(valid, pos, big))  # valid positions ascending, then the -1 slots
    tl.store(out_ptr + row.to(tl.int64) * stride_out + c, tl.where(srt == big, -1, srt),
             mask=c < k_out)


@triton.jit
def _candidate_mask_kernel(in_ptr, stride_in, mask_ptr, stride_mask, num_scores, keep,
                           BC: tl.constexpr, BS: tl.constexpr):
    row = tl.program_id(0)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    x = tl.load(in_ptr + row.to(tl.int64) * stride_in + c)
    valid = ((x >> 32) > -2139095041) & (c < keep)
    blk = (4294967295 - (x & 4294967295)).to(tl.int32)
    t = blk[:, None] * BS + tl.arange(0, BS)[None, :]
    ones = tl.full((BC, BS), 1, tl.int8)
    tl.store(mask_ptr + row.to(tl.int64) * stride_mask + t, ones,
             mask=valid[:, None] & (t < num_scores))


@triton.jit
def _block_mask_kernel(pos_ptr, stride_pos, mask_ptr, stride_mask, num_scores, keep,
                       BC: tl.constexpr, BS: tl.constexpr):
    """Mask entries of the kept blocks: ``keep`` block indices per row (-1: none)."""
    row = tl.program_id(0)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    blk = tl.load(pos_ptr + row.to(tl.int64) * stride_pos + c, mask=c < keep, other=-1)
    t = blk.to(tl.int32)[:, None] * BS + tl.arange(0, BS)[None, :]
    ones = tl.full((BC, BS), 1, tl.int8)
    tl.store(mask_ptr + row.to(tl.int64) * stride_mask + t, ones,
             mask=(blk >= 0)[:, None] & (t < num_scores))


def _tile(kp: int) -> int:
    return max(TOPK_TILE, 4 * kp)


def stage_meta(kp: int, mode: int, has_vis: bool = False) -> dict[str, Any]:
    """Constexprs and launch options of a stage (shared with the SM90 compile test)."""
    return dict(BT=_tile(kp), KP=kp, MODE=mode, HAS_VIS=has_vis, num_warps=NUM_WARPS,
                num_stages=1)


MASK_ROWS = 256  # survivors per candidate-mask program
BLOCK_KEY_TILE = 1024  # blocks per block-key program


def _select(src: torch.Tensor, kp: int, mode: int,
            num_visible: torch.Tensor | None = None) -> torch.Tensor:
    """Run stages until one tile is left; returns (rows, KP) packed keys, largest first.
    num_visible (rows,) int64, in units of ``src``'s columns: the first stage skips tiles at or
    beyond it (all -inf there)."""
    rows = src.shape[0]
    while True:
        meta = stage_meta(kp, mode, has_vis=num_visible is not None)
        tiles = cdiv(src.shape[1], meta["BT"])
        out = attn_common.alloc((rows, tiles * kp), torch.int64, src.device)
        vis = num_visible if num_visible is not None else out
        _topk_stage_kernel[(rows, tiles)](src, src.stride(0), src.shape[1], out, out.stride(0),
                                          vis, **meta)
        if tiles == 1:
            return out
        src, mode, num_visible = out, MODE_PACKED, None


def topk_positions(scores: torch.Tensor, k: int, num_visible: torch.Tensor | None = None,
                   *, method: str = "auto") -> torch.Tensor:
    """Triton version of ``reference.indexer.topk_positions``: (N, T) fp32 -> (N, min(k, T))
    int64 positions sorted ascending, -1 for picks with a -inf score. ``num_visible`` (N,):
    every score at or beyond it is -inf (the caller's promise): tiles there are not read, so
    the cost follows the context, not T (a CUDA graph's fixed width).

    ``method``: "radix" (``topk_radix``: one program per row, histogram passes + an ordered
    compaction), "bisect" (``topk_bisect``: one warp per row, a bisection select + the same
    compaction; rows up to its ``MAX_ENTRIES``), "stage" (the blocked tl.topk stages + a final
    sort), or "auto" (a shape-only choice): bisect for ``topk_bisect.takes`` (many short rows:
    a prefill's queries), else radix up to ``RADIX_MAX_ENTRIES`` scores per row, else stage."""
    n, t = scores.shape
    if method == "auto":
        method = ("bisect" if topk_bisect.takes(n, t)
                  else "radix" if t <= RADIX_MAX_ENTRIES else "stage")
    if method == "bisect":
        return topk_bisect.topk_positions_bisect(scores, k, num_visible)
    if method == "radix":
        return topk_radix.topk_positions_radix(scores, k, num_visible)
    if method != "stage":
        raise ValueError(f"topk_positions: method {method!r} is not auto, bisect, radix or "
                         "stage")
    out = topk_radix.positions_out(scores, k)
    n, k_out = out.shape
    if out.numel() == 0:
        return out
    kp = max(2, next_power_of_2(k_out))  # tl.topk / tl.sort need >= 2 elements
    vis = None if num_visible is None else num_visible.to(torch.int64).contiguous()
    packed = _select(scores, kp, MODE_SCORES, vis)
    _topk_positions_final_kernel[(n,)](packed, packed.stride(0), out, out.stride(0), k_out,
                                       KP=kp, num_warps=4)
    return out


def select_candidate_blocks(scores: torch.Tensor, num_visible: torch.Tensor, num_blocks: int,
                            block_size: int, *, method: str = "auto") -> torch.Tensor:
    """Triton version of ``reference.indexer.select_candidate_blocks``: (N, T) bool mask of the
    best ``num_blocks`` blocks (by max score; newest visible block pinned). Scores at or beyond
    ``num_visible`` must be -inf (as the reference's visibility mask leaves them): they are not
    read, and blocks wholly beyond it are not sorted.
    ``method``: "radix" (the block maxima through ``topk_radix``, then a mask of the kept
    blocks), "stage" (packed block keys through the ``tl.topk`` stages), or "auto": radix up to
    ``RADIX_MAX_ENTRIES`` blocks per row (the stage path sorted a graph-wide tile of 8,192
    block keys with tl.topk(2048) at every decode step, whatever the context)."""
    if method not in ("auto", "radix", "stage"):
        raise ValueError(f"select_candidate_blocks: method {method!r} is not auto, radix or "
                         "stage")
    n, t = scores.shape
    mask = torch.zeros(n, t, dtype=torch.bool, device=scores.device)
    nb = cdiv(t, block_size)
    keep = min(num_blocks, nb)
    if n == 0 or keep == 0:
        return mask
    if scores.stride(-1) != 1 or block_size & (block_size - 1):
        raise ValueError("select_candidate_blocks: contiguous rows and a power-of-2 block size")
    kp = max(2, next_power_of_2(keep))  # tl.topk / tl.sort need >= 2 elements
    radix = method == "radix" or (method == "auto" and nb <= RADIX_MAX_ENTRIES)
    keys = attn_common.alloc((n, nb), torch.float32 if radix else torch.int64, scores.device)
    bb = min(BLOCK_KEY_TILE, next_power_of_2(nb))
    _block_keys_kernel[(n, cdiv(nb, bb))](scores, scores.stride(0), t,
                                                 num_visible.contiguous(), keys,
                                                 keys.stride(0), nb, BB=bb, BS=block_size,
                                                 PACKED=not radix, num_warps=4)
    vis_blocks = (num_visible.to(torch.int64) + block_size - 1) // block_size
    if radix:  # the kept blocks' indices ascending, -1 for -inf picks (never kept)
        one_row = (topk_bisect.topk_positions_bisect if topk_bisect.takes(n, nb)
                   else topk_radix.topk_positions_radix)
        kept = one_row(keys, keep, vis_blocks)
        bc = min(MASK_ROWS, kp)
        _block_mask_kernel[(n, cdiv(keep, bc))](kept, kept.stride(0), mask.view(torch.int8),
                                                       mask.stride(0), t, keep, BC=bc,
                                                       BS=block_size, num_warps=4)
        return mask
    packed = _select(keys, kp, MODE_PACKED, vis_blocks.contiguous())
    bc = min(MASK_ROWS, kp)
    _candidate_mask_kernel[(n, kp // bc)](packed, packed.stride(0), mask.view(torch.int8),
                                          mask.stride(0), t, keep, BC=bc, BS=block_size,
                                          num_warps=4)
    return mask


def supports_topk(spec: dict[str, Any]) -> bool:
    """k (index_topk or candidate_topk_blocks) <= 4096; T < 2^32; block size a power of 2."""
    k = int(spec.get("index_topk", 512))
    kb = int(spec.get("candidate_topk_blocks", 2048))
    bs = int(spec.get("candidate_block_size", 8))
    t = int(spec.get("num_entries", 1 << 20))
    return cuda_sm90(spec) and k <= 4096 and kb <= 4096 and t < 2**32 and bs & (bs - 1) == 0


def aot_cases() -> list[dict[str, Any]]:
    f = {"in_ptr": "*fp32", "out_ptr": "*i64"}
    p = {"in_ptr": "*i64", "out_ptr": "*i64"}
    return [
        dict(name="topk stage scores k512", module=__name__, kernel="_topk_stage_kernel",
             types=dict(f, vis_ptr="*i64"), meta=stage_meta(512, MODE_SCORES, has_vis=True)),
        dict(name="topk stage packed k512", module=__name__, kernel="_topk_stage_kernel",
             types=dict(p, vis_ptr="*i64"), ci=False, meta=stage_meta(512, MODE_PACKED)),
        dict(name="topk final k512", module=__name__, kernel="_topk_positions_final_kernel",
             types=p, meta=dict(KP=512, num_warps=4)),
        dict(name="candidate block keys x8", module=__name__, kernel="_block_keys_kernel",
             types=dict(f, vis_ptr="*i64"), meta=dict(BB=BLOCK_KEY_TILE, BS=8, num_warps=4)),
        dict(name="candidate stage packed 2048", module=__name__,
             kernel="_topk_stage_kernel", types=dict(p, vis_ptr="*i64"),
             meta=stage_meta(2048, MODE_PACKED, has_vis=True)),
        dict(name="candidate mask 2048x8", module=__name__, kernel="_candidate_mask_kernel",
             types={"in_ptr": "*i64", "mask_ptr": "*i8"}, ci=False,
             meta=dict(BC=MASK_ROWS, BS=8, num_warps=4)),
        dict(name="candidate block maxima x8", module=__name__, kernel="_block_keys_kernel",
             types={"in_ptr": "*fp32", "vis_ptr": "*i64", "out_ptr": "*fp32"},
             meta=dict(BB=BLOCK_KEY_TILE, BS=8, PACKED=False, num_warps=4)),
        dict(name="candidate block mask 2048x8", module=__name__, kernel="_block_mask_kernel",
             types={"pos_ptr": "*i64", "mask_ptr": "*i8"},
             meta=dict(BC=MASK_ROWS, BS=8, num_warps=4)),
    ] + topk_radix.aot_cases() + topk_bisect.aot_cases()


def register_triton_topk() -> None:
    attn_common.register_with_reference("topk_positions", topk_positions, supports_topk)
    attn_common.register_with_reference("select_candidate_blocks", select_candidate_blocks,
                                        supports_topk)
