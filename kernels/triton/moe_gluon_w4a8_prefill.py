"""Prefill expert GEMM with FP8 tensor cores over MXFP4 weights in the W4A8 kernel order, in
Gluon (SM90 only): ``moe_gluon_w4a8``'s decode kernel with 32 (or 64) pairs per program instead
of 8, so that a weight tile is read once per 32 tokens of its expert (prefill: ~64 per expert
at 4K). The engine's prefill path on the W4A8 layout (``moe_experts.run_experts``).

    out[p, o] = sum over K of W_e[o, k] * x[p, k]      (p: the block's pairs, sorted by expert)

  * Both operands come by TMA into one STAGES-deep ring (one mbarrier per stage): the weight
    tile [64 rows per warpgroup, 64 bytes] in kernel order, and the token tile [BM, 128] of
    e4m3 codes from the activation GATHERED into sorted-pair order (``gather_rows``: row
    b * BM + t = the codes of the block's pair t), so a block's tokens are one box.
  * Per 32-K group: one wgmma m64 nBM k32 (FP8, weights from registers, unpacked by
    ``moe_gluon_w4a8._group_operands``: 5 instructions per 8 weights) into a fresh
    accumulator, then the promotion acc += acc_g * 2^(ew + ex - 121). Two groups are in
    flight: the promotion of group g (CUDA cores) runs while group g + 1's wgmma does.
  * Scales are read as int32 words (4 groups = one K step). ``EXPANDED`` (off until timed):
    the token scales come pre-expanded (``expand_token_scales``: (e - 121) << 23 in the
    accumulator's column order), which saves the per-group byte extraction (390 -> 311
    instructions per K step per thread in the sm_90 SASS).
  * Measured (session 11, rounds 41-44): 10.5-10.9 ms per 4K-token layer against 12.3-12.8
    for the Triton tiles, 13-16 % of the FP8 peak — bound by instruction issue and latency
    (promotion: 2 instructions per accumulator element per group), not by the token traffic.

Shapes: x codes (num_blocks * BM, K) uint8 e4m3 and scales (num_blocks * BM, K/32) uint8 in
sorted-pair order (EXPANDED: (num_blocks, K/32, BM) int32); w (E, O, K/2) uint8 in
``to_kernel_order``; ws (E, O, K/32) uint8; sorted_pairs (num_blocks * BM,) int32 (padding =
num_pairs); block_expert (num_blocks,) int32 (-1 idle); out (num_pairs, O). Reference:
``moe_gluon.reference_grouped`` on the dequantized activation (tests/gpu/test_moe_gluon_gpu.py).
"""

from __future__ import annotations

import torch

from deepinfer.kernels.mxfp4_w4a8_order import TILE_ROWS
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON
from deepinfer.kernels.triton.moe_gluon_w4a8 import tiled_descriptor

ROWS = 64  # weight rows per warpgroup: the wgmma M side
WARPGROUPS = 1  # warpgroups per program, stacked on the weight rows (one token tile; 2 and 4
#   were slower in round 43: the kernel is instruction-bound, not token-traffic-bound)
BLOCK_K = 128  # K per pipeline step: 4 groups of 32
BLOCK_M = 32  # pairs per program: the wgmma N side (32: 128 registers, 4 programs per SM; round 41)

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from deepinfer.kernels.triton.moe_gluon import cta_barrier, tile_row0
    from deepinfer.kernels.triton.moe_gluon_w4a8 import _group_operands, promote_words

    _TILE = gl.constexpr(TILE_ROWS)  # rows per step tile of the W4A8 order

    @gluon.jit
    def _issue(w_desc, x_desc, w_s, x_s, bars, row0, x_row0, step, num_steps,
               STAGES: gl.constexpr, BM: gl.constexpr, ROWS_: gl.constexpr):
        """TMA of K step ``step``'s weight tile [ROWS_, 64 B] and token tile [BM, 128] into
        ring stage step % STAGES (none past the last step)."""
        st = step % STAGES
        ok = step < num_steps
        mbarrier.expect(bars.index(st), ROWS_ * 64 + BM * 128, pred=ok)
        tma.async_copy_global_to_shared(w_desc, [row0 + step * _TILE, 0], bars.index(st),
                                        w_s.index(st), pred=ok)
        tma.async_copy_global_to_shared(x_desc, [x_row0, step * 128], bars.index(st),
                                        x_s.index(st), pred=ok)

    @gluon.jit
    def _promote_expanded(acc, acc_g, ew, ex_b, g: gl.constexpr):
        """``promote_words`` with the token scales already expanded: ex_b [BM] int32 =
        (ex_g - 121) << 23 (``expand_token_scales``), ew as there."""
        ew_b = ((ew >> (8 * g)) & 0xFF) << 23
        return acc + acc_g * (ew_b[:, None] + ex_b[None, :]).to(gl.float32, bitcast=True)

    @gluon.jit
    def _promote_any(acc, acc_g, ew, ex_g, g: gl.constexpr, EXPANDED: gl.constexpr):
        """``_promote_expanded`` (ex_g: group g's expanded token scales) or ``promote_words``
        (ex_g: the tokens' scale words)."""
        if EXPANDED:
            return _promote_expanded(acc, acc_g, ew, ex_g, g)
        else:
            return promote_words(acc, acc_g, ew, ex_g, g)

    @gluon.jit
    def _token_exponents(xe_ptr, base, BM: gl.constexpr, XE_L: gl.constexpr,
                         COL_L: gl.constexpr):
        """One group's expanded token scales [BM] int32 in the accumulator's column layout:
        stored at position p = (BM / 4) q + 2 j + u for token 8 j + 2 q + u, so a thread's
        BM / 4 tokens are contiguous (vector loads) and a reshape / permute (free) puts them
        in token order."""
        p = gl.arange(0, BM, layout=XE_L)
        e = gl.load(xe_ptr + base + p)
        e = gl.reshape(gl.permute(gl.reshape(e, [4, BM // 8, 2]), [1, 0, 2]), [BM])
        return gl.convert_layout(e, COL_L)

    @gluon.jit
    def _step_exponents(xe_ptr, block, step, num_steps, BM: gl.constexpr, XE_L: gl.constexpr,
                        COL_L: gl.constexpr):
        """The 4 groups' expanded token scales of one K step (``_token_exponents``)."""
        base = (block.to(gl.int64) * (num_steps * 4) + step * 4) * BM
        return (_token_exponents(xe_ptr, base, BM, XE_L, COL_L),
                _token_exponents(xe_ptr, base + BM, BM, XE_L, COL_L),
                _token_exponents(xe_ptr, base + 2 * BM, BM, XE_L, COL_L),
                _token_exponents(xe_ptr, base + 3 * BM, BM, XE_L, COL_L))

    @gluon.jit
    def _mma(a, x8, k0: gl.constexpr, z):
        return warpgroup_mma(a, x8.slice(k0, 32, dim=1).permute((1, 0)), z, use_acc=False,
                             is_async=True)

    @gluon.jit
    def _w4a8_prefill_kernel(x_desc, xs_ptr, w_desc, s_ptr, pairs_ptr, block_expert_ptr,
                             out_ptr, num_pairs, O, K, stride_xs4, stride_se, stride_sn4,
                             stride_om, STAGES: gl.constexpr, BM: gl.constexpr,
                             WARP_ROWS: gl.constexpr, XE_L: gl.constexpr,
                             EXPANDED: gl.constexpr, num_warps: gl.constexpr):
        # the register layouts of moe_gluon_w4a8._w4a8_decode_kernel (see there), at N = BM,
        # with num_warps / 4 warpgroups stacked on the rows (64 each; one token tile)
        ROWS_: gl.constexpr = 16 * num_warps
        L64: gl.constexpr = gl.DistributedLinearLayout(
            reg_bases=[[0, 1], [0, 2], [8, 0], [0, 4], [0, 8]],
            lane_bases=[[0, 16], [0, 32], [1, 0], [2, 0], [4, 0]],
            warp_bases=WARP_ROWS, block_bases=[], shape=[ROWS_, 64])
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                       warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BM, 32])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4)
        ROW_L: gl.constexpr = gl.SliceLayout(1, MMA)
        COL_L: gl.constexpr = gl.SliceLayout(0, MMA)
        block = gl.program_id(0)
        tile = gl.program_id(1)
        expert = gl.load(block_expert_ptr + block)
        if expert >= 0:
            gl.static_assert(_TILE % ROWS_ == 0, "a weight box within one step tile")
            num_steps = K // 128
            row0 = tile_row0(expert * O + tile * ROWS_, num_steps, _TILE)  # step tiles
            x_row0 = block * BM
            w_s = gl.allocate_shared_memory(gl.uint8, [STAGES, ROWS_, 64], w_desc.layout)
            x_s = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BM, 128], x_desc.layout)
            bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
            for b in gl.static_range(STAGES):
                mbarrier.init(bars.index(b), count=1)
            for b in gl.static_range(STAGES - 1):
                _issue(w_desc, x_desc, w_s, x_s, bars, row0, x_row0, b, num_steps, STAGES, BM,
                       ROWS_)

            # scales as int32 words (4 groups = one K step): a thread's 2 rows and BM / 4
            # tokens, in the accumulator's row and column layouts
            r_w = tile * ROWS_ + gl.arange(0, ROWS_, layout=ROW_L)
            sw_ptrs = (s_ptr + expert.to(gl.int64) * stride_se + r_w * (stride_sn4 * 4)).to(
                gl.pointer_type(gl.int32), bitcast=True)
            t_s = x_row0 + gl.arange(0, BM, layout=COL_L)
            xs_ptrs = (xs_ptr + t_s.to(gl.int64) * (stride_xs4 * 4)).to(
                gl.pointer_type(gl.int32), bitcast=True)

            acc = gl.zeros([ROWS_, BM], gl.float32, MMA)
            z = gl.zeros([ROWS_, BM], gl.float32, MMA)
            if EXPANDED:  # xs_ptr: the expanded int32 exponents (expand_token_scales)
                ex_next = gl.zeros([BM], gl.int32, COL_L)
            else:
                ex_next = gl.load(xs_ptrs)
            ew_next = gl.load(sw_ptrs)
            for i in range(num_steps):
                # every warp is past step i - 1's reads of the stage the TMA below refills
                cta_barrier()
                _issue(w_desc, x_desc, w_s, x_s, bars, row0, x_row0, i + STAGES - 1,
                       num_steps, STAGES, BM, ROWS_)
                # the scales one step ahead (their load latency hides behind this step)
                ex = ex_next
                ew = ew_next
                nxt = gl.minimum(i + 1, num_steps - 1)
                if EXPANDED:  # this step's 4 groups, loaded here: a step-ahead copy costs 38
                    # registers (3 programs per SM instead of 4) and ~30 moves per step
                    ex0, ex1, ex2, ex3 = _step_exponents(xs_ptr, block, i, num_steps, BM, XE_L,
                                                         COL_L)
                else:  # the 4 groups' bytes in one word per token
                    ex_next = gl.load(xs_ptrs + nxt)
                    ex0, ex1, ex2, ex3 = ex, ex, ex, ex
                ew_next = gl.load(sw_ptrs + nxt)
                stage = i % STAGES
                mbarrier.wait(bars.index(stage), (i // STAGES) & 1)
                a0, a1, a2, a3 = _group_operands(w_s.index(stage).load(L64), LA)
                x8 = x_s.index(stage)
                c0 = _mma(a0, x8, 0, z)
                c1 = _mma(a1, x8, 32, z)
                c0 = warpgroup_mma_wait(num_outstanding=1, deps=(c0,))
                acc = _promote_any(acc, c0, ew, ex0, 0, EXPANDED)
                c2 = _mma(a2, x8, 64, z)
                c1 = warpgroup_mma_wait(num_outstanding=1, deps=(c1,))
                acc = _promote_any(acc, c1, ew, ex1, 1, EXPANDED)
                c3 = _mma(a3, x8, 96, z)
                c2 = warpgroup_mma_wait(num_outstanding=1, deps=(c2,))
                acc = _promote_any(acc, c2, ew, ex2, 2, EXPANDED)
                c3 = warpgroup_mma_wait(num_outstanding=0, deps=(c3,))
                acc = _promote_any(acc, c3, ew, ex3, 3, EXPANDED)
            for b in gl.static_range(STAGES):
                mbarrier.invalidate(bars.index(b))
            rows_o = tile * ROWS_ + gl.arange(0, ROWS_, layout=ROW_L)
            pairs_o = gl.load(pairs_ptr + block * BM + gl.arange(0, BM, layout=COL_L))
            valid = pairs_o < num_pairs
            offs = (gl.where(valid, pairs_o, 0).to(gl.int64) * stride_om)[None, :] \
                + rows_o[:, None]
            gl.store(out_ptr + offs, acc, mask=valid[None, :] & (rows_o[:, None] >= 0))

    def token_descriptor(codes: torch.Tensor, block_m: int):
        """TMA descriptor of gathered e4m3 codes (rows, K) uint8: boxes [BM, 128], 128-byte
        swizzle (the wgmma B operand's shared layout)."""
        fp8 = codes.view(torch.float8_e4m3fn)
        layout = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
        return TensorDescriptor(fp8, list(fp8.shape), list(fp8.stride()), [block_m, 128],
                                layout)

    def exponent_layout(block_m: int, num_warps: int):
        """[BM] positions of ``expand_token_scales``' order: BM / 4 contiguous per quad lane
        q (lane bits 0-1), replicated over the other lanes and the warps."""
        regs = [[1 << b] for b in range((block_m // 4).bit_length() - 1)]
        return gl.DistributedLinearLayout(
            reg_bases=regs, lane_bases=[[block_m // 4], [block_m // 2], [0], [0], [0]],
            warp_bases=[[0]] * (num_warps.bit_length() - 1), block_bases=[], shape=[block_m])


def warp_rows(warpgroups: int) -> tuple[tuple[int, int], ...]:
    """The row bases of a program's warps (16 rows each; warpgroups stacked by 64); a tuple:
    launch constexprs are hashed."""
    return tuple((16 << b, 0) for b in range(2 + (warpgroups - 1).bit_length()))


def gather_rows(codes: torch.Tensor, scales: torch.Tensor, sorted_pairs: torch.Tensor,
                num_pairs: int, row_div: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Activation codes (rows, K) and scales (rows, K/32) -> the rows of the sorted pairs:
    row i = that of pair sorted_pairs[i] // row_div (padding: row 0, never stored)."""
    rows = torch.where(sorted_pairs < num_pairs, sorted_pairs // row_div, 0).long()
    return codes.index_select(0, rows), scales.index_select(0, rows)


def expand_token_scales(scales: torch.Tensor, block_m: int) -> torch.Tensor:
    """Gathered token scales (num_blocks * BM, K/32) uint8 -> the EXPANDED kernel's int32
    exponents (num_blocks, K/32, BM): (e - 121) << 23 (the promotion's bias folded in), token
    8 j + 2 q + u of a block at position (BM / 4) q + 2 j + u (a thread's tokens contiguous).
    Saves the kernel the per-group byte extraction of each token's scale word."""
    rows, groups = scales.shape
    e = (scales.to(torch.int32) - 121) << 23
    e = e.view(rows // block_m, block_m // 8, 4, 2, groups).permute(0, 4, 2, 1, 3)
    return e.reshape(rows // block_m, groups, block_m).contiguous()


def w4a8_prefill_gemm(x_codes: torch.Tensor, x_scales: torch.Tensor, w: torch.Tensor,
                      s: torch.Tensor, sorted_pairs: torch.Tensor, block_expert: torch.Tensor,
                      num_pairs: int, out: torch.Tensor, stages: int = 4,
                      block_m: int = BLOCK_M, warpgroups: int = WARPGROUPS,
                      expanded: bool = False) -> torch.Tensor:
    """out[pair] (num_pairs, O; its dtype) = Q8_32 x[pair] @ W[expert]^T for the pairs a block
    holds, the fp32 sums rounded once. x_codes / x_scales: ``gather_rows`` of the Q8_32 codes
    (num_blocks * block_m rows); w (E, O, K/2) in ``to_kernel_order``, s (E, O, K/32) uint8;
    pairs grouped by ``moe_align.align_pairs(ids, E, block_m)``; ``warpgroups`` (1 or 2: a
    weight box within one step tile) x 64 weight rows per program. ``expanded``: x_scales is
    ``expand_token_scales`` of them (int32; the EXPANDED kernel: no per-group byte extraction
    — compiled on the CPU, not yet timed on a GPU)."""
    assert HAS_GLUON, "w4a8_prefill_gemm needs triton's Gluon"
    num_experts, out_features, half = w.shape
    k = half * 2
    rows = ROWS * warpgroups
    assert k % BLOCK_K == 0 and out_features % TILE_ROWS == 0 and x_codes.shape[1] == k
    assert TILE_ROWS % rows == 0, (warpgroups, TILE_ROWS)
    assert block_m in (8, 16, 32, 64, 128) and x_codes.shape[0] == sorted_pairs.numel()
    assert x_codes.is_contiguous() and x_scales.is_contiguous() and s.stride(1) % 4 == 0
    if expanded:
        assert x_scales.dtype == torch.int32 and x_scales.shape == (
            sorted_pairs.numel() // block_m, k // 32, block_m), x_scales.shape
    else:
        assert x_scales.stride(0) % 4 == 0  # 4-byte scale loads
    grid = (block_expert.numel(), out_features // rows)
    _w4a8_prefill_kernel[grid](
        token_descriptor(x_codes, block_m), x_scales, tiled_descriptor(w, rows), s,
        sorted_pairs, block_expert, out, num_pairs, out_features, k,
        0 if expanded else x_scales.stride(0) // 4, s.stride(0), s.stride(1) // 4, out.stride(0),
        STAGES=stages, BM=block_m, WARP_ROWS=warp_rows(warpgroups),
        XE_L=exponent_layout(block_m, 4 * warpgroups), EXPANDED=expanded,
        num_warps=4 * warpgroups)
    return out


def run_experts_w4a8_prefill(x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor,
                             w1, w3, w2, limit: float, combine_ids: torch.Tensor | None = None,
                             stages: int = 3, block_m: int = BLOCK_M,
                             warpgroups: int = WARPGROUPS, expanded: bool = False,
                             combine: bool = True) -> torch.Tensor:
    """The routed experts at prefill sizes with this kernel (GPU, SM90): (N, D) -> (N, D)
    fp32, the semantics of ``moe_gluon_w4a8.run_experts_w4a8`` (and so of
    ``moe_experts.run_experts``). Launches: Q8_32 of x, align (block_m pairs per block),
    gather, gated GEMM (two launches: g, u in x.dtype), ``moe_swiglu.swiglu_q8``, gather, down
    GEMM, combine (``combine=False``: the per-pair outputs, as there). ``expanded``: the token
    scales go through ``expand_token_scales`` (one
    more small launch per gather; unmeasured, hence off)."""
    from deepinfer.kernels.triton import moe_align, moe_swiglu, quant_act
    from deepinfer.kernels.triton.moe_experts import _weight_args, combine_pairs

    num_tokens, topk = expert_ids.shape
    num_pairs = num_tokens * topk
    (d1, s1, _, _), (d3, s3, _, _), (d2, s2, _, _) = (_weight_args(w) for w in (w1, w3, w2))
    inter, dim = d1.shape[1], d2.shape[1]
    codes, scales = quant_act.quant_q8_32(x.contiguous())
    pairs, blocks = moe_align.align_pairs(expert_ids, d1.shape[0], block_m)
    def gather(c, sc, div):
        gc, gs = gather_rows(c, sc, pairs, num_pairs, div)
        return gc, (expand_token_scales(gs, block_m) if expanded else gs)

    def gemm(c, sc, d, s, out):
        w4a8_prefill_gemm(c, sc, d, s, pairs, blocks, num_pairs, out, stages, block_m,
                          warpgroups, expanded)

    xc, xs = gather(codes, scales, topk)
    g = torch.empty((num_pairs, inter), dtype=x.dtype, device=x.device)
    u = torch.empty_like(g)
    gemm(xc, xs, d1, s1, g)
    gemm(xc, xs, d3, s3, u)
    h_codes, h_scales = moe_swiglu.swiglu_q8(g, u, weights.reshape(-1), limit, x.dtype)
    hc, hs = gather(h_codes, h_scales, 1)
    y = torch.empty((num_pairs, dim), dtype=x.dtype, device=x.device)
    gemm(hc, hs, d2, s2, y)
    if not combine:  # the per-pair outputs (N * topk, D) in x.dtype, as run_experts gives
        return y
    return combine_pairs(y, expert_ids if combine_ids is None else combine_ids)
