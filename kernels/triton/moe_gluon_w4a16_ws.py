"""``moe_gluon_w4a16_ss`` with warp specialization (Gluon, SM90): a decoder warpgroup turns the
MXFP4 weights into bf16 tiles in shared memory while two consumer warpgroups keep the tensor
core busy with the wgmmas.

    out[p, o] = sum over K of W_e[o, k] * x[p, k]      (p: the block's pairs, sorted by expert)

Why: in ``moe_gluon_w4a16_ss`` every warp decodes, stores, meets a CTA barrier and then issues
its wgmmas, one 32-K group at a time; the tensor core waits through each group's decode (H200
round 147: 2.21 ms per 4K gated call, the register-A kernel 1.88). Here the two jobs run in
separate warps and meet only at mbarriers, through a ring of ``DECODED`` decoded tiles:

  * decoder partition (4 warps, ``DECODER_REGS`` registers): issues the weight TMA (its ring
    ``WEIGHT_STAGES`` deep, two [128, 64 B] boxes a step), loads a step's words, and per 32-K
    group extracts and scales them (``moe_gluon_w4a16_prefill``'s decode, K permuted within a
    group as the gathered tokens are), waits until ring slot n % DECODED is free, stores the
    [256, 32] bf16 tile there, fences it for the async proxy and arrives on its "ready"
    barrier;
  * consumer partition (the default, 8 warps = 2 warpgroups, N halves of 128): issues the token
    TMA (ring ``STAGES`` deep), waits on a slot's "ready" barrier, issues acc_t += x_t @ tile^T
    for its one or two token tiles of 64 (m64 n128 k16 a warpgroup), waits until only that
    group is in flight and frees the slot of the group before ("empty" barrier).
  * The same products in the same K order as the register-A kernel: the same bits (round 147
    checked the SS kernel so).

Shapes and grid: ``moe_gluon_w4a16_ss``'s (tokens from ``gather_tokens`` at block_m 128, 256
output rows a program).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from deepinfer.kernels.mxfp4_w4a8_order import TILE_ROWS
from deepinfer.kernels.triton import moe_gluon_w4a16_ss as ss
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON
from deepinfer.kernels.triton.moe_gluon_w4a8 import tiled_descriptor

DECODED = 4  # decoded tiles in the ring [256, 32] bf16 (16 KB each)
STAGES = 2  # token ring depth
WEIGHT_STAGES = 3  # weight ring depth
DECODER_WARPS = 8  # the decoder partition: 4 (one warpgroup) or 8 (two, each 128 rows)
# registers per decoder thread (setmaxnreg) and the launch cap (all warps x 32 x cap <= 64K),
# by DECODER_WARPS; the consumers take the rest
DECODER_REGS = {4: 152, 8: 96}
MAXNREG = {4: 168, 8: 128}
INFLIGHT = 1  # groups of wgmmas a consumer leaves in flight after issuing one (1 or 2)

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        warpgroup_mma,
    )

    from deepinfer.kernels.triton.moe_gluon import tile_row0
    from deepinfer.kernels.triton.moe_gluon_w4a16_prefill import (
        _extract,
        _issue_x,
        _scaled,
        _step_words,
        token_descriptor,
    )
    from deepinfer.kernels.triton.moe_gluon_w4a16_ss import (
        _DEC_SHARED,
        _ROWS,
        _issue_w2,
        _store_ss,
        _wait_ss,
    )

    _DECODED = gl.constexpr(DECODED)

    @gluon.jit
    def _produce(words, sw, g: gl.constexpr, d_s, dec_ready, dec_empty, n,
                 ONE_MUL: gl.constexpr, LA: gl.constexpr):
        """Group n (group g of its step): decode, wait for ring slot n % DECODED, store, fence,
        signal."""
        a = _scaled(_extract(words), sw, g, ONE_MUL, LA)
        slot = n % _DECODED
        mbarrier.wait(dec_empty.index(slot), ((n // _DECODED) & 1) ^ 1)
        d_s.index(slot).store(a)
        fence_async_shared()
        mbarrier.arrive(dec_ready.index(slot), count=1)  # after the partition's barrier

    @gluon.jit
    def _decoder(w_desc, w_s, bars, d_s, dec_ready, dec_empty, s_ptr, expert, tile, stride_se,
                 stride_sn4, row0, num_steps, STAGES: gl.constexpr, WSTAGES: gl.constexpr,
                 ONE_MUL: gl.constexpr, PG: gl.constexpr):
        """The decoder warpgroup: the weight ring and the decoded tiles of every group."""
        DEC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                       warps_per_cta=[gl.num_warps(), 1],
                                                       instr_shape=[16, 32, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=DEC, k_width=2)
        r_w = tile * _ROWS + gl.arange(0, _ROWS, layout=gl.SliceLayout(1, PG))
        s_words = (s_ptr + expert.to(gl.int64) * stride_se
                   + r_w.to(gl.int64) * (stride_sn4 * 4)).to(gl.pointer_type(gl.int32),
                                                             bitcast=True)
        for b in gl.static_range(WSTAGES - 1):
            _issue_w2(w_desc, w_s, bars, row0, b, num_steps, STAGES, WSTAGES)
        sw_next = gl.load(s_words)
        for i in range(num_steps):
            # stage (i - 1) % WSTAGES was read at step i - 1, before the partition barriers of
            # its groups' arrivals: refill it
            _issue_w2(w_desc, w_s, bars, row0, i + WSTAGES - 1, num_steps, STAGES, WSTAGES)
            sw = sw_next
            sw_next = gl.load(s_words + gl.minimum(i + 1, num_steps - 1))
            mbarrier.wait(bars.index(STAGES + i % WSTAGES), (i // WSTAGES) & 1)
            p0, p1, p2, p3 = _step_words(w_s, i % WSTAGES, PG)
            _produce(p0, sw, 0, d_s, dec_ready, dec_empty, 4 * i, ONE_MUL, LA)
            _produce(p1, sw, 1, d_s, dec_ready, dec_empty, 4 * i + 1, ONE_MUL, LA)
            _produce(p2, sw, 2, d_s, dec_ready, dec_empty, 4 * i + 2, ONE_MUL, LA)
            _produce(p3, sw, 3, d_s, dec_ready, dec_empty, 4 * i + 3, ONE_MUL, LA)

    @gluon.jit
    def _consume(d_s, dec_ready, dec_empty, n, x_t, C0: gl.constexpr, acc0, acc1,
                 NT: gl.constexpr, INFLIGHT: gl.constexpr):
        """Group n: wait for its decoded tile, issue its wgmmas, wait until only the last
        INFLIGHT groups' are in flight and free the tile of group n - INFLIGHT."""
        slot = n % _DECODED
        mbarrier.wait(dec_ready.index(slot), (n // _DECODED) & 1)
        b = d_s.index(slot).permute((1, 0))  # [32, 256]: K-major B
        x_g = x_t.slice(C0, 32, dim=1)
        acc0 = warpgroup_mma(x_g.slice(0, 64, dim=0), b, acc0, is_async=True)
        if NT == 2:
            acc1 = warpgroup_mma(x_g.slice(64, 64, dim=0), b, acc1, is_async=True)
        acc0, acc1 = _wait_ss(acc0, acc1, NT, INFLIGHT)
        mbarrier.arrive(dec_empty.index((n + _DECODED - INFLIGHT) % _DECODED), count=1,
                        pred=n >= INFLIGHT)
        return acc0, acc1

    @gluon.jit
    def _consumer_loop(x_desc, xa_s, xb_s, d_s, bars, dec_ready, dec_empty, x_row0, num_steps,
                       STAGES: gl.constexpr, NT: gl.constexpr, MMA: gl.constexpr,
                       INFLIGHT: gl.constexpr):
        """The consumer's K loop over NT token tiles; returns both accumulators (the second
        zeros when NT = 1)."""
        for b in gl.static_range(STAGES - 1):
            _issue_x(x_desc, x_desc, xa_s, xb_s, bars, x_row0, b, num_steps, STAGES, 64 * NT, 0)
        acc0 = gl.zeros([64, _ROWS], gl.float32, MMA)
        acc1 = gl.zeros([64, _ROWS], gl.float32, MMA)
        for i in range(num_steps):
            mbarrier.wait(bars.index(i % STAGES), (i // STAGES) & 1)
            xa = xa_s.index(i % STAGES)
            xb = xb_s.index(i % STAGES)
            acc0, acc1 = _consume(d_s, dec_ready, dec_empty, 4 * i, xa, 0, acc0, acc1, NT,
                                  INFLIGHT)
            if INFLIGHT == 1:
                # group 4 i - 1, the last reader of token stage (i - 1) % STAGES, is done in
                # both warpgroups (the arrive's partition barrier): refill it
                _issue_x(x_desc, x_desc, xa_s, xb_s, bars, x_row0, i + STAGES - 1, num_steps,
                         STAGES, 64 * NT, 0)
            acc0, acc1 = _consume(d_s, dec_ready, dec_empty, 4 * i + 1, xa, 32, acc0, acc1, NT,
                                  INFLIGHT)
            if INFLIGHT == 2:  # here group 4 i - 1 is done
                _issue_x(x_desc, x_desc, xa_s, xb_s, bars, x_row0, i + STAGES - 1, num_steps,
                         STAGES, 64 * NT, 0)
            acc0, acc1 = _consume(d_s, dec_ready, dec_empty, 4 * i + 2, xb, 0, acc0, acc1, NT,
                                  INFLIGHT)
            acc0, acc1 = _consume(d_s, dec_ready, dec_empty, 4 * i + 3, xb, 32, acc0, acc1, NT,
                                  INFLIGHT)
        acc0, acc1 = _wait_ss(acc0, acc1, NT, 0)
        if NT == 1:
            acc1 = acc0
        return acc0, acc1

    @gluon.jit
    def _consumer(x_desc, xh_desc, xa_s, xb_s, d_s, bars, dec_ready, dec_empty, pairs_ptr,
                  num_pairs, block, num_steps, STAGES: gl.constexpr, INFLIGHT: gl.constexpr):
        """The consumer warpgroups (default partition): one token tile or two, by whether slot
        64 of the block holds a pair."""
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                       instr_shape=[16, 128, 16])
        if gl.load(pairs_ptr + block * 128 + 64) < num_pairs:
            acc0, acc1 = _consumer_loop(x_desc, xa_s, xb_s, d_s, bars, dec_ready, dec_empty,
                                        block * 128, num_steps, STAGES, 2, MMA, INFLIGHT)
        else:
            acc0, acc1 = _consumer_loop(xh_desc, xa_s, xb_s, d_s, bars, dec_ready, dec_empty,
                                        block * 128, num_steps, STAGES, 1, MMA, INFLIGHT)
        return acc0, acc1

    @gluon.jit
    def _w4a16_ws_kernel(x_desc, xh_desc, w_desc, s_ptr, pairs_ptr, block_expert_ptr, out_ptr,
                         num_pairs, O, K, stride_se, stride_sn4, stride_om,
                         STAGES: gl.constexpr, WSTAGES: gl.constexpr, ONE_MUL: gl.constexpr,
                         PG: gl.constexpr, DECODER_WARPS: gl.constexpr,
                         DECODER_REGS: gl.constexpr, INFLIGHT: gl.constexpr,
                         num_warps: gl.constexpr):
        # x_desc / xh_desc: token boxes [128, 64] / [64, 64]; PG (``group_layout_ws``): the
        # weight stage's words [256, 16] in the decoder warpgroup's registers
        gl.static_assert(num_warps == 8, "two consumer warpgroups")
        tile = gl.program_id(0)
        block = gl.program_id(1)
        expert = gl.load(block_expert_ptr + block)
        if expert >= 0:
            num_steps = K // 128
            row0 = tile_row0(expert * O + tile * _ROWS, num_steps, ss._TILE)
            w_s = gl.allocate_shared_memory(gl.uint8, [WSTAGES, _ROWS, 64], w_desc.layout)
            xa_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 128, 64], x_desc.layout)
            xb_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 128, 64], x_desc.layout)
            d_s = gl.allocate_shared_memory(gl.bfloat16, [_DECODED, _ROWS, 32], _DEC_SHARED)
            # the token stages, then the weight stages (``_issue_x`` / ``_issue_w2``'s order)
            bars = gl.allocate_shared_memory(gl.int64, [STAGES + WSTAGES, 1],
                                             mbarrier.MBarrierLayout())
            dec_ready = gl.allocate_shared_memory(gl.int64, [_DECODED, 1],
                                                  mbarrier.MBarrierLayout())
            dec_empty = gl.allocate_shared_memory(gl.int64, [_DECODED, 1],
                                                  mbarrier.MBarrierLayout())
            for b in gl.static_range(STAGES + WSTAGES):
                mbarrier.init(bars.index(b), count=1)
            for b in gl.static_range(_DECODED):
                mbarrier.init(dec_ready.index(b), count=1)
                mbarrier.init(dec_empty.index(b), count=1)
            acc0, acc1 = gl.warp_specialize([
                (_consumer, (x_desc, xh_desc, xa_s, xb_s, d_s, bars, dec_ready, dec_empty,
                             pairs_ptr, num_pairs, block, num_steps, STAGES, INFLIGHT)),
                (_decoder, (w_desc, w_s, bars, d_s, dec_ready, dec_empty, s_ptr, expert, tile,
                            stride_se, stride_sn4, row0, num_steps, STAGES, WSTAGES, ONE_MUL,
                            PG)),
            ], [DECODER_WARPS], [DECODER_REGS])
            MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                           instr_shape=[16, 128, 16])
            _store_ss(acc0, pairs_ptr, out_ptr, num_pairs, tile * _ROWS, block * 128,
                      stride_om, MMA)
            if gl.load(pairs_ptr + block * 128 + 64) < num_pairs:
                _store_ss(acc1, pairs_ptr, out_ptr, num_pairs, tile * _ROWS, block * 128 + 64,
                          stride_om, MMA)


def w4a16_ws_gemm(tokens: torch.Tensor, w: torch.Tensor, s: torch.Tensor,
                  sorted_pairs: torch.Tensor, block_expert: torch.Tensor, num_pairs: int,
                  out: torch.Tensor, one_mul: bool = False, stages: int | None = None,
                  weight_stages: int | None = None, decoder_warps: int | None = None,
                  inflight: int | None = None) -> torch.Tensor:
    """``moe_gluon_w4a16_ss.w4a16_ss_gemm``'s contract on the warp-specialized kernel (rings:
    ``STAGES`` / ``WEIGHT_STAGES``, decoder warps ``DECODER_WARPS``, groups of wgmmas in flight
    ``INFLIGHT`` by default, read at the call)."""
    dw = DECODER_WARPS if decoder_warps is None else decoder_warps
    assert HAS_GLUON, "w4a16_ws_gemm needs triton's Gluon"
    num_experts, out_features, half = w.shape
    k = half * 2
    assert k % ss.BLOCK_K == 0 and out_features % ss.ROWS == 0 and tokens.shape[1] == k, w.shape
    assert tokens.shape[0] == sorted_pairs.numel() == block_expert.numel() * ss.BLOCK_M
    assert tokens.dtype == torch.bfloat16 and tokens.is_contiguous() and s.stride(1) % 4 == 0
    grid = (out_features // ss.ROWS, block_expert.numel())
    _w4a16_ws_kernel[grid](
        token_descriptor(tokens, ss.BLOCK_M), token_descriptor(tokens, 64),
        tiled_descriptor(w, TILE_ROWS), s, sorted_pairs, block_expert, out, num_pairs,
        out_features, k, s.stride(0), s.stride(1) // 4, out.stride(0),
        STAGES=STAGES if stages is None else stages,
        WSTAGES=WEIGHT_STAGES if weight_stages is None else weight_stages, ONE_MUL=one_mul,
        PG=group_layout_ws(dw), DECODER_WARPS=dw, DECODER_REGS=DECODER_REGS[dw],
        INFLIGHT=INFLIGHT if inflight is None else inflight, num_warps=8,
        maxnreg=MAXNREG[dw])
    return out


@functools.cache
def group_layout_ws(decoder_warps: int):
    """A weight stage's int32 words [256, 16] in the decoder partition's registers:
    ``moe_gluon_w4a16_prefill.group_layout`` (warps of 16 rows, rows r and r + 8 of a thread)
    repeated over the rows past 16 x warps, the decoded [256, 32] tile then the wgmma
    A-operand layout of that many warps along M (stored by stmatrix). 8 warps: the SS
    kernel's layout."""
    if decoder_warps == 8:
        return ss.group_layout_ss()
    assert decoder_warps == 4, decoder_warps
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0], [64, 0], [128, 0]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[ss.ROWS, 16])


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/test_moe_w4a16_ss.py): both decodes, two
    ring depths, 4 and 8 decoder warps."""
    cases = []
    for stages, wstages, one_mul, dw in ((2, 3, True, 8), (2, 3, False, 8), (3, 3, True, 8),
                                         (2, 3, True, 4)):
        base = ss.aot_cases()[0]
        cases.append({**base,
                      "id": f"w4a16_ws_s{stages}_w{wstages}_{'one' if one_mul else 'two'}"
                            f"_dw{dw}",
                      "module": __name__, "kernel": "_w4a16_ws_kernel",
                      "constexprs": {"STAGES": stages, "WSTAGES": wstages, "ONE_MUL": one_mul,
                                     "PG": {"call": "group_layout_ws", "args": [dw]},
                                     "DECODER_WARPS": dw, "DECODER_REGS": DECODER_REGS[dw],
                                     "INFLIGHT": 1 + (stages == 3), "num_warps": 8},
                      "maxnreg": MAXNREG[dw]})
    return cases
