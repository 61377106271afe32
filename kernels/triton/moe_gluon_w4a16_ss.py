"""Prefill expert GEMM over MXFP4 weights in the W4A8 kernel order with both wgmma operands in
shared memory (Gluon, SM90 only): the tokens are the A operand (M = 64 per tile), the weights,
decoded to exactly scaled bf16 once per program, the B operand (N = 256 weight rows).

    out[p, o] = sum over K of W_e[o, k] * x[p, k]      (p: the block's pairs, sorted by expert)

Why (docs/performance.md, sessions 24-26): ``moe_gluon_w4a16_prefill`` feeds its decoded weights
to register-A wgmmas of N = the block's tokens. At 4K tokens an expert holds ~64 pairs, so its
wgmmas are m64 n64 k16 (32 tensor cycles each) and the loop's fixed cost per 32-K group (the
operand TMA, mbarrier waits, one wgmma wait per group) is paid for 64 x 64 outputs: ~1.75 ms per
GEMM call against 0.73 ms of tensor work. Here the same decode (``mxfp4_w4a8_bf16``: integer
``EXTRACT``, then one or two bf16x2 multiplies) writes a 256-row x 32-K tile into shared memory,
and each warpgroup issues m64 n128 k16 wgmmas (64 tensor cycles; 128 when a block holds more
than 64 pairs: two token tiles share the decoded weights) that stay in flight while the next
group decodes.

  * Program: 256 weight rows (two step tiles of the order, one per warpgroup, each one TMA box
    [128, 64 B] per 128-K step) x one block of ``BLOCK_M`` = 128 sorted pair slots; the token
    tiles: one (slots 0-63) or two when slot 64 holds a pair (``_ss_block``'s NT).
  * Per 32-K group g: extract and scale the group's words into registers (the layout of
    ``moe_gluon_w4a16_prefill``: column v of a row holds K = 32 G + K_off(v); the tokens are
    gathered in that order by ``gather_tokens``), wait until only group g - 1's wgmmas are in
    flight, store into decoded buffer g % 3, fence, CTA barrier, issue the wgmmas. Three
    buffers: a thread's rows are read by both warpgroups' wgmmas (N halves), and the barrier of
    group g - 1 orders every warpgroup's wait for group g - 3 before any store of group g.
  * The operand rings: the token ring (``STAGES`` deep, two [BM, 64] bf16 boxes a step,
    128-byte swizzle) and the weight ring (``WEIGHT_STAGES``, two [128, 64 B] boxes), refilled
    after group 1's barrier of each step (every warpgroup past its wait: the previous step's
    wgmmas are done, its words long in registers).
  * Grid: (O / 256 tiles, blocks), tiles fastest, as ``moe_gluon_w4a16_prefill``.

Shapes: tokens (num_blocks * 128, K) bf16 from ``moe_gluon_w4a16_prefill.gather_tokens``; w (E,
O, K/2) uint8 in ``moe_gluon_w4a8.to_kernel_order``; ws (E, O, K/32) uint8; sorted_pairs
(num_blocks * 128,) int32 (padding = num_pairs); block_expert (num_blocks,) int32 (-1 idle); out
(num_pairs, O) any float dtype. Reference: ``moe_gluon.reference_grouped`` on the Q8_32 values
(tests/gpu/test_moe_gluon_gpu.py).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from deepinfer.kernels.mxfp4_w4a8_order import TILE_ROWS
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON
from deepinfer.kernels.triton.moe_gluon_w4a8 import tiled_descriptor

ROWS = 256  # weight rows per program: the wgmma N, 128 per warpgroup (one step tile each)
BLOCK_M = 128  # pair slots per block: one or two token tiles of 64 (the wgmma M)
BLOCK_K = 128  # K per ring step: 4 groups of 32
STAGES = 2  # token ring depth
WEIGHT_STAGES = 2  # weight ring depth
DECODED = 3  # decoded weight buffers [256, 32] bf16 (see the module docstring)

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    from deepinfer.kernels.triton.moe_gluon import cta_barrier, tile_row0
    from deepinfer.kernels.triton.moe_gluon_w4a16_prefill import (
        _extract,
        _issue_x,
        _scaled,
        _step_words,
        token_descriptor,
    )

    _TILE = gl.constexpr(TILE_ROWS)
    _ROWS = gl.constexpr(ROWS)
    _DECODED = gl.constexpr(DECODED)
    # the decoded weight tile [256 rows, 32 K] bf16: 64-byte rows, the wgmma B side (K-major)
    _DEC_SHARED = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=16,
                                                    rank=2))

    @gluon.jit
    def _issue_w2(w_desc, w_s, bars, row0, step, num_steps, STAGES: gl.constexpr,
                  WSTAGES: gl.constexpr):
        """TMA of K step ``step``'s two weight boxes [128, 64 B] (the program's two step tiles:
        rows row0 and row0 + num_steps * 128 of the flattened order) into weight stage step %
        WSTAGES (barrier STAGES + that stage; none past the last step)."""
        st = step % WSTAGES
        ok = step < num_steps
        bar = bars.index(STAGES + st)
        mbarrier.expect(bar, _ROWS * 64, pred=ok)
        tma.async_copy_global_to_shared(w_desc, [row0 + step * _TILE, 0], bar,
                                        w_s.index(st).slice(0, _TILE, dim=0), pred=ok)
        tma.async_copy_global_to_shared(w_desc, [row0 + (num_steps + step) * _TILE, 0], bar,
                                        w_s.index(st).slice(_TILE, _TILE, dim=0), pred=ok)

    @gluon.jit
    def _wait_ss(acc0, acc1, NT: gl.constexpr, LEFT: gl.constexpr):
        """Wait until at most LEFT groups' wgmmas (NT each) are in flight."""
        if NT == 2:
            acc0, acc1 = warpgroup_mma_wait(num_outstanding=LEFT * 2, deps=(acc0, acc1))
        else:
            acc0 = warpgroup_mma_wait(num_outstanding=LEFT, deps=(acc0, ))
            acc1 = acc0
        return acc0, acc1

    @gluon.jit
    def _group(words, sw, g: gl.constexpr, d_s, n, x_t, C0: gl.constexpr, acc0, acc1,
               NT: gl.constexpr, ONE_MUL: gl.constexpr, LA: gl.constexpr):
        """Global 32-K group n (group g of its step): decode, store into buffer n % 3, issue
        acc_t += x_t[64 t : 64 t + 64, C0 : C0 + 32] @ decoded^T for the NT token tiles."""
        a = _scaled(_extract(words), sw, g, ONE_MUL, LA)
        acc0, acc1 = _wait_ss(acc0, acc1, NT, 1)  # group n - 2 done here
        d = d_s.index(n % _DECODED)
        d.store(a)
        fence_async_shared()
        cta_barrier()  # every warpgroup's stores, and its wait for group n - 2, are done
        b = d.permute((1, 0))  # [32, 256]: K-major B
        x_g = x_t.slice(C0, 32, dim=1)
        acc0 = warpgroup_mma(x_g.slice(0, 64, dim=0), b, acc0, is_async=True)
        if NT == 2:
            acc1 = warpgroup_mma(x_g.slice(64, 64, dim=0), b, acc1, is_async=True)
        return acc0, acc1

    @gluon.jit
    def _store_ss(acc, pairs_ptr, out_ptr, num_pairs, row_lo, slot0, stride_om,
                  MMA: gl.constexpr):
        """acc [64 slots, 256 rows] (layout MMA) -> out[pairs[slot0 + j], row_lo + c] (the
        valid slots)."""
        rows_o = row_lo + gl.arange(0, _ROWS, layout=gl.SliceLayout(0, MMA))
        pairs_o = gl.load(pairs_ptr + slot0 + gl.arange(0, 64, layout=gl.SliceLayout(1, MMA)))
        valid = pairs_o < num_pairs
        offs = (gl.where(valid, pairs_o, 0).to(gl.int64) * stride_om)[:, None] + rows_o[None, :]
        gl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty),
                 mask=valid[:, None] & (rows_o[None, :] >= 0))

    @gluon.jit
    def _ss_block(x_desc, w_desc, w_s, xa_s, xb_s, d_s, bars, s_words, pairs_ptr, out_ptr,
                  num_pairs, row0, row_lo, block, num_steps, stride_om, STAGES: gl.constexpr,
                  WSTAGES: gl.constexpr, NT: gl.constexpr, ONE_MUL: gl.constexpr,
                  PG: gl.constexpr):
        """The K loop of one program over NT token tiles of 64 slots, and the store."""
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                       instr_shape=[16, 128, 16])
        DEC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                       instr_shape=[16, 32, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=DEC, k_width=2)
        x_row0 = block * 128
        for b in gl.static_range(WSTAGES - 1):
            _issue_w2(w_desc, w_s, bars, row0, b, num_steps, STAGES, WSTAGES)
        for b in gl.static_range(STAGES - 1):
            _issue_x(x_desc, x_desc, xa_s, xb_s, bars, x_row0, b, num_steps, STAGES, 64 * NT, 0)
        acc0 = gl.zeros([64, _ROWS], gl.float32, MMA)
        acc1 = acc0
        sw_next = gl.load(s_words)
        for i in range(num_steps):
            sw = sw_next
            sw_next = gl.load(s_words + gl.minimum(i + 1, num_steps - 1))
            mbarrier.wait(bars.index(STAGES + i % WSTAGES), (i // WSTAGES) & 1)
            p0, p1, p2, p3 = _step_words(w_s, i % WSTAGES, PG)
            mbarrier.wait(bars.index(i % STAGES), (i // STAGES) & 1)
            xa = xa_s.index(i % STAGES)
            xb = xb_s.index(i % STAGES)
            acc0, acc1 = _group(p0, sw, 0, d_s, 4 * i, xa, 0, acc0, acc1, NT, ONE_MUL, LA)
            acc0, acc1 = _group(p1, sw, 1, d_s, 4 * i + 1, xa, 32, acc0, acc1, NT, ONE_MUL, LA)
            # past group 4 i + 1's barrier: every warpgroup waited for group 4 i - 1 (the last
            # reader of token stage (i - 1) % STAGES) and holds step i - 1's words
            _issue_w2(w_desc, w_s, bars, row0, i + WSTAGES - 1, num_steps, STAGES, WSTAGES)
            _issue_x(x_desc, x_desc, xa_s, xb_s, bars, x_row0, i + STAGES - 1, num_steps,
                     STAGES, 64 * NT, 0)
            acc0, acc1 = _group(p2, sw, 2, d_s, 4 * i + 2, xb, 0, acc0, acc1, NT, ONE_MUL, LA)
            acc0, acc1 = _group(p3, sw, 3, d_s, 4 * i + 3, xb, 32, acc0, acc1, NT, ONE_MUL, LA)
            # plain registers across the back edge (group 4 i + 3 stays in flight)
            acc0, acc1 = _wait_ss(acc0, acc1, NT, 1)
        acc0, acc1 = _wait_ss(acc0, acc1, NT, 0)
        _store_ss(acc0, pairs_ptr, out_ptr, num_pairs, row_lo, block * 128, stride_om, MMA)
        if NT == 2:
            _store_ss(acc1, pairs_ptr, out_ptr, num_pairs, row_lo, block * 128 + 64, stride_om,
                      MMA)

    @gluon.jit
    def _w4a16_ss_kernel(x_desc, xh_desc, w_desc, s_ptr, pairs_ptr, block_expert_ptr, out_ptr,
                         num_pairs, O, K, stride_se, stride_sn4, stride_om,
                         STAGES: gl.constexpr, WSTAGES: gl.constexpr, ONE_MUL: gl.constexpr,
                         PG: gl.constexpr, num_warps: gl.constexpr):
        # x_desc / xh_desc: token boxes [128, 64] / [64, 64]; PG (``group_layout_ss``): the
        # weight stage's int32 words [256, 16] in registers
        gl.static_assert(num_warps == 8, "two warpgroups")
        tile = gl.program_id(0)
        block = gl.program_id(1)
        expert = gl.load(block_expert_ptr + block)
        if expert >= 0:
            num_steps = K // 128
            row0 = tile_row0(expert * O + tile * _ROWS, num_steps, _TILE)
            w_s = gl.allocate_shared_memory(gl.uint8, [WSTAGES, _ROWS, 64], w_desc.layout)
            xa_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 128, 64], x_desc.layout)
            xb_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 128, 64], x_desc.layout)
            d_s = gl.allocate_shared_memory(gl.bfloat16, [_DECODED, _ROWS, 32], _DEC_SHARED)
            bars = gl.allocate_shared_memory(gl.int64, [STAGES + WSTAGES, 1],
                                             mbarrier.MBarrierLayout())
            for b in gl.static_range(STAGES + WSTAGES):
                mbarrier.init(bars.index(b), count=1)
            r_w = tile * _ROWS + gl.arange(0, _ROWS, layout=gl.SliceLayout(1, PG))
            s_words = (s_ptr + expert.to(gl.int64) * stride_se
                       + r_w.to(gl.int64) * (stride_sn4 * 4)).to(gl.pointer_type(gl.int32),
                                                                 bitcast=True)
            if gl.load(pairs_ptr + block * 128 + 64) < num_pairs:
                _ss_block(x_desc, w_desc, w_s, xa_s, xb_s, d_s, bars, s_words, pairs_ptr,
                          out_ptr, num_pairs, row0, tile * _ROWS, block, num_steps, stride_om,
                          STAGES, WSTAGES, 2, ONE_MUL, PG)
            else:
                _ss_block(xh_desc, w_desc, w_s, xa_s, xb_s, d_s, bars, s_words, pairs_ptr,
                          out_ptr, num_pairs, row0, tile * _ROWS, block, num_steps, stride_om,
                          STAGES, WSTAGES, 1, ONE_MUL, PG)
            for b in gl.static_range(STAGES + WSTAGES):
                mbarrier.invalidate(bars.index(b))


def w4a16_ss_gemm(tokens: torch.Tensor, w: torch.Tensor, s: torch.Tensor,
                  sorted_pairs: torch.Tensor, block_expert: torch.Tensor, num_pairs: int,
                  out: torch.Tensor, one_mul: bool = False, stages: int | None = None,
                  weight_stages: int | None = None) -> torch.Tensor:
    """out[pair] (num_pairs, O; its dtype) = x[pair] @ W[expert]^T for the pairs a block holds,
    the fp32 sums rounded once: ``moe_gluon_w4a16_prefill.w4a16_prefill_gemm``'s contract at
    block_m = ``BLOCK_M`` (pairs grouped by ``moe_align.align_pairs(ids, E, 128)``; tokens from
    its ``gather_tokens``). O must be a multiple of 256. ``stages`` / ``weight_stages``: the
    rings' depths (defaults ``STAGES`` / ``WEIGHT_STAGES``, read at the call)."""
    assert HAS_GLUON, "w4a16_ss_gemm needs triton's Gluon"
    num_experts, out_features, half = w.shape
    k = half * 2
    assert k % BLOCK_K == 0 and out_features % ROWS == 0 and tokens.shape[1] == k, w.shape
    assert tokens.shape[0] == sorted_pairs.numel() == block_expert.numel() * BLOCK_M
    assert tokens.dtype == torch.bfloat16 and tokens.is_contiguous() and s.stride(1) % 4 == 0
    grid = (out_features // ROWS, block_expert.numel())
    _w4a16_ss_kernel[grid](
        token_descriptor(tokens, BLOCK_M), token_descriptor(tokens, 64),
        tiled_descriptor(w, TILE_ROWS), s, sorted_pairs, block_expert, out, num_pairs,
        out_features, k, s.stride(0), s.stride(1) // 4, out.stride(0),
        STAGES=STAGES if stages is None else stages,
        WSTAGES=WEIGHT_STAGES if weight_stages is None else weight_stages, ONE_MUL=one_mul,
        PG=group_layout_ss(), num_warps=8)
    return out


def accepts(out_features: list[int]) -> bool:
    """Whether every projection's output features tile by the program's 256 rows."""
    return all(o % ROWS == 0 for o in out_features)


@functools.cache
def group_layout_ss():
    """A weight stage's int32 words [256, 16] in registers (word 4 q + G of a row: quad lane q,
    group G): ``moe_gluon_w4a16_prefill.group_layout`` of 8 warps (rows r, r + 8 of a thread,
    16 rows a warp) repeated for rows 128-255, so that the decoded [256, 32] tile lands in the
    wgmma A-operand layout of 8 warps along M without shuffles."""
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0], [128, 0]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0], [64, 0]], block_bases=[], shape=[ROWS, 16])


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/test_moe_w4a16_ss.py): both decodes, ring
    depths 2 and 3."""
    cases = []
    for stages, wstages, one_mul in ((2, 2, True), (2, 2, False), (3, 3, True)):
        cases.append({"id": f"w4a16_ss_s{stages}_w{wstages}_{'one' if one_mul else 'two'}",
                      "gluon": True, "module": __name__, "kernel": "_w4a16_ss_kernel",
                      "signature": {"x_desc": "tma:bf16:128:128x64",
                                    "xh_desc": "tma:bf16:128:64x64",
                                    "w_desc": f"tma:u8:0:{TILE_ROWS}x64", "s_ptr": "*u8",
                                    "pairs_ptr": "*i32", "block_expert_ptr": "*i32",
                                    "out_ptr": "*bf16", "num_pairs": "i32", "O": "i32",
                                    "K": "i32", "stride_se": "i32", "stride_sn4": "i32",
                                    "stride_om": "i32"},
                      "constexprs": {"STAGES": stages, "WSTAGES": wstages, "ONE_MUL": one_mul,
                                     "PG": {"call": "group_layout_ss", "args": []},
                                     "num_warps": 8},
                      "num_warps": 8, "num_stages": 1, "no_spill": True,
                      "expect_wgmma": True, "divisible": ["K", "O"]})
    return cases
