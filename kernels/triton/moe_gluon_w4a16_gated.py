"""The prefill experts' gated GEMM with the SwiGLU and its Q8_32 rounding in the epilogue
(Gluon, SM90 only; a prepared variant, off: ``moe_gluon_w4a16_prefill.GATED_SWIGLU``).

    h[p, i] = Q8_32(route_w[p] * silu(min(g, limit)) * clamp(u, -limit, limit))
    g = x[p] @ W1_e[i]^T,   u = x[p] @ W3_e[i]^T        (p: a block's pairs, sorted by expert)

stored as the down GEMM reads its tokens (slot-major, each 32-column group in the bf16 wgmma A
operand's order: ``moe_swiglu.swiglu_fake_q8_slots``' layout).

Why: the pipeline runs the gated GEMM as two launches (g, then u: each writes (pairs, I) bf16,
113 MB at a 4K prompt's 24,576 pairs) and ``swiglu_fake_q8_slots`` reads both back and writes
h (113 MB): ~450 MB and two launches a layer that this kernel does not spend. Per program: the
``moe_gluon_w4a16_prefill_ws`` loop (a producer warp issues the TMA, one consumer warpgroup
decodes and issues the wgmmas) with its two A fragments taken from the same 64 intermediate
features of w1 and of w3 (two accumulators of one token tile), so a feature's g and u land in
the same thread; the epilogue rounds them to the activation dtype as the two stores did, runs
``moe_swiglu.swiglu_h``'s arithmetic, and rounds h to Q8_32 per 32 features — each group's
absolute max is a masked reduction over the accumulator's rows (rows 0-31 and 32-63 of the
tile: two warps each) — with ``quant_act.q8_32_groups``' arithmetic, then stores the values in
the permuted columns of the pairs' slots (padding slots are not written). The bits are those
of the unfused pipeline (the same products and fp32 sums per accumulator, the same
elementwise arithmetic); tests/gpu/test_moe_gluon_gpu.py compares them.

Shapes: tokens (num_blocks * BM, K) bf16 (``gather_tokens``); w1, w3 (E, I, K/2) uint8 in the
W4A8 order, s1, s3 (E, I, K/32) uint8; route_w (pairs,) fp32; sorted_pairs (num_blocks * BM,)
int32 (padding = num_pairs); block_expert (num_blocks,) int32 (-1 idle); out (num_blocks * BM,
I) bf16.
"""

from __future__ import annotations

from typing import Any

import torch

from deepinfer.kernels.mxfp4_w4a8_order import TILE_ROWS
from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as base
from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as ws
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON
from deepinfer.kernels.triton.moe_gluon_w4a8 import tiled_descriptor

FEATURES = 64  # intermediate features per program: 64 rows of w1 and 64 of w3
STAGES = 2  # ring depth (a stage: the two 4 KB weight boxes and the step's token boxes)
ACT_BF16 = 1  # ``moe_swiglu.ACT_CODES``: the activation dtype h is rounded to
# the producer warp's registers (setmaxnreg): the consumer warpgroup, with two accumulators and
# the epilogue, gets the rest of the two-programs-per-SM budget (128 a thread at launch)
PRODUCER_REGS = 24

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    from deepinfer.kernels.triton.moe_gluon import tile_row0

    _TILE = gl.constexpr(TILE_ROWS)
    _WORDS_SHARED = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))

    @gluon.jit
    def _producer(x_desc, w1_desc, w3_desc, w_s, xa_s, xb_s, full, empty, row0, x_row0,
                  num_steps, S: gl.constexpr, BN: gl.constexpr):
        """Step i's w1 and w3 boxes [64, 64 B] (ring slots 2 st and 2 st + 1) and token boxes
        into stage st = i % S once the consumer freed it."""
        for i in range(num_steps):
            st = i % S
            mbarrier.wait(empty.index(st), ((i // S) & 1) ^ 1, pred=i >= S)
            bar = full.index(st)
            mbarrier.expect(bar, 2 * 64 * 64 + BN * 256)
            tma.async_copy_global_to_shared(w1_desc, [row0 + i * _TILE, 0], bar,
                                            w_s.index(2 * st))
            tma.async_copy_global_to_shared(w3_desc, [row0 + i * _TILE, 0], bar,
                                            w_s.index(2 * st + 1))
            tma.async_copy_global_to_shared(x_desc, [x_row0, i * 128], bar,
                                            xa_s.index(st).slice(0, BN, dim=0))
            tma.async_copy_global_to_shared(x_desc, [x_row0, i * 128 + 64], bar,
                                            xb_s.index(st).slice(0, BN, dim=0))

    @gluon.jit
    def _words(w_s, slot, LW: gl.constexpr):
        """A ring slot's 64 rows of words as its 4 groups' [64, 4] int32 (``_step_words``)."""
        words = w_s.index(slot)._reinterpret(gl.int32, [64, 16], _WORDS_SHARED).load(LW)
        p = gl.reshape(words, [64, 4, 2, 2])  # q, G1, G0
        p_even, p_odd = gl.split(p)
        p0, p2 = gl.split(p_even)
        p1, p3 = gl.split(p_odd)
        return p0, p1, p2, p3

    @gluon.jit
    def _issue(ag, au, x_t, accg, accu, BN: gl.constexpr, C0: gl.constexpr):
        """One 32-K group's wgmmas: accg += ag @ x^T, accu += au @ x^T (the same token slice)."""
        x_g = x_t.slice(C0, 32, dim=1).slice(0, BN, dim=0).permute((1, 0))
        accg = warpgroup_mma(ag, x_g, accg, is_async=True)
        accu = warpgroup_mma(au, x_g, accu, is_async=True)
        return accg, accu

    @gluon.jit
    def _wait2(accg, accu):
        return warpgroup_mma_wait(num_outstanding=0, deps=(accg, accu))

    @gluon.jit
    def _round_act(v, ACT: gl.constexpr):
        """``moe_swiglu.round_act``: fp32 -> the activation dtype and back."""
        if ACT == 1:
            v = v.to(gl.bfloat16).to(gl.float32)
        elif ACT == 2:
            v = v.to(gl.float16).to(gl.float32)
        return v

    @gluon.jit
    def _e4m3_grid(y):
        """``quant_act.round_to_e4m3_grid``'s arithmetic."""
        bits = y.to(gl.int32, bitcast=True)
        rounded = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576
        normal = rounded.to(gl.float32, bitcast=True)
        sub = (y + 24576.0) - 24576.0
        sub = gl.where(sub == 0.0, y * 0.0, sub)
        return gl.where(gl.abs(y) < 0.015625, sub, normal)

    @gluon.jit
    def _q8_values(h, amax):
        """``quant_act.q8_32_groups`` then ``q8_32_values`` of h given its group's absolute
        max (same shape): the Q8_32 values in fp32 (NaN for a non-finite group)."""
        amax = gl.maximum(amax, 1e-4)
        bits = (amax * (1.0 / 448.0)).to(gl.int32, bitcast=True)
        exponent = (bits >> 23) & 0xFF
        e = exponent + ((bits & 0x7FFFFF) != 0).to(gl.int32)
        e = gl.where(exponent == 0xFF, 0xFF, e)
        inv_scale = ((254 - e) << 23).to(gl.float32, bitcast=True)
        y = gl.minimum(gl.maximum(h * inv_scale, -448.0), 448.0)
        codes = _e4m3_grid(y).to(gl.float8e4nv)
        v = codes.to(gl.float32) * (e << 23).to(gl.float32, bitcast=True)  # quant_act.ue8m0_to_f32
        return gl.where(e == 0xFF, float("nan"), v)

    @gluon.jit
    def _epilogue(accg, accu, pairs_ptr, rw_ptr, out_ptr, num_pairs, col0, slot0, stride_om,
                  limit, ACT: gl.constexpr, MMA: gl.constexpr):
        """accg, accu [64, BN] bf16 (features x slots) -> h's Q8_32 values stored at out[slot,
        col0 + 32 G + v] = h[feature col0 + 32 G + K_off(v)] for the block's live pairs."""
        BN: gl.constexpr = accg.shape[1]
        slots = slot0 + gl.arange(0, BN, layout=gl.SliceLayout(0, MMA))
        pairs = gl.load(pairs_ptr + slots)
        live = pairs < num_pairs
        rw = gl.load(rw_ptr + gl.where(live, pairs, 0), mask=live, other=0.0)
        # moe_swiglu.swiglu_h on the bf16 values the two stores would have written
        g = gl.minimum(_round_act(accg.to(gl.float32), ACT), limit)
        u = gl.minimum(gl.maximum(_round_act(accu.to(gl.float32), ACT), -limit), limit)
        h = g / (1.0 + gl.exp(-g)) * u
        h = _round_act(rw[None, :] * h, ACT)
        # per slot, the absolute max of features 0-31 and of 32-63 (two warps each)
        feat = gl.arange(0, 64, layout=gl.SliceLayout(1, MMA))
        low = (feat < 32)[:, None]
        a = gl.abs(h)
        amax_lo = gl.max(gl.where(low, a, 0.0), axis=0)
        amax_hi = gl.max(gl.where(low, 0.0, a), axis=0)
        amax = gl.where(low, amax_lo[None, :], amax_hi[None, :])
        v = _q8_values(h, amax)
        # feature k of a 32-group sits at column v = (k >> 1 & 7) | (k & 1) << 3 | (k & 16)
        k = feat % 32
        col = col0 + (feat - k) + (((k >> 1) & 7) | ((k & 1) << 3) | (k & 16))
        # int32 offsets (the wrapper checks the output's size): 64-bit pointers for every
        # element of a 64 x 128 tile spill at the launch's register cap
        offs = slots[None, :] * stride_om + col[:, None]
        gl.store(out_ptr + offs, v.to(gl.bfloat16), mask=live[None, :] & (col >= 0)[:, None])

    @gluon.jit
    def _consumer(w_s, xa_s, xb_s, full, empty, s1_words, s3_words, pairs_ptr, rw_ptr,
                  out_ptr, num_pairs, col0, block, num_steps, stride_om, limit,
                  S: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, ONE_MUL: gl.constexpr,
                  PG: gl.constexpr, ACT: gl.constexpr):
        """``moe_gluon_w4a16_prefill_ws._consumer``'s loop with the w1 and w3 fragments in
        their own accumulators, then the SwiGLU epilogue."""
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        sw1 = gl.load(s1_words)
        sw3 = gl.load(s3_words)
        nxt1 = gl.load(s1_words + gl.minimum(num_steps - 1, 1))
        nxt3 = gl.load(s3_words + gl.minimum(num_steps - 1, 1))
        mbarrier.wait(full.index(0), 0)
        g0, g1, g2, g3 = _words(w_s, 0, PG)
        u0, u1, u2, u3 = _words(w_s, 1, PG)
        ag = base._scaled(base._extract(g0), sw1, 0, ONE_MUL, LA)
        au = base._scaled(base._extract(u0), sw3, 0, ONE_MUL, LA)
        accg = gl.zeros([64, BN], gl.float32, MMA)
        accu = gl.zeros([64, BN], gl.float32, MMA)
        for i in range(num_steps):
            st = i % S
            xa = xa_s.index(st)
            xb = xb_s.index(st)
            accg, accu = _issue(ag, au, xa, accg, accu, BN, 0)
            bg = base._extract(g1)
            bu = base._extract(u1)
            accg, accu = _wait2(accg, accu)
            ag = base._scaled(bg, sw1, 1, ONE_MUL, LA)
            au = base._scaled(bu, sw3, 1, ONE_MUL, LA)
            accg, accu = _issue(ag, au, xa, accg, accu, BN, 32)
            bg = base._extract(g2)
            bu = base._extract(u2)
            accg, accu = _wait2(accg, accu)
            ag = base._scaled(bg, sw1, 2, ONE_MUL, LA)
            au = base._scaled(bu, sw3, 2, ONE_MUL, LA)
            accg, accu = _issue(ag, au, xb, accg, accu, BN, 0)
            bg = base._extract(g3)
            bu = base._extract(u3)
            accg, accu = _wait2(accg, accu)
            ag = base._scaled(bg, sw1, 3, ONE_MUL, LA)
            au = base._scaled(bu, sw3, 3, ONE_MUL, LA)
            accg, accu = _issue(ag, au, xb, accg, accu, BN, 32)
            # the next step's words (the last step reloads its own), its first group
            # extracted while this step's last group runs
            nx = gl.minimum(i + 1, num_steps - 1)
            sw1 = nxt1
            sw3 = nxt3
            nxt1 = gl.load(s1_words + gl.minimum(i + 2, num_steps - 1))
            nxt3 = gl.load(s3_words + gl.minimum(i + 2, num_steps - 1))
            mbarrier.wait(full.index(nx % S), (nx // S) & 1)
            g0, g1, g2, g3 = _words(w_s, 2 * (nx % S), PG)
            u0, u1, u2, u3 = _words(w_s, 2 * (nx % S) + 1, PG)
            bg = base._extract(g0)
            bu = base._extract(u0)
            accg, accu = _wait2(accg, accu)
            mbarrier.arrive(empty.index(st), count=1)
            ag = base._scaled(bg, sw1, 0, ONE_MUL, LA)
            au = base._scaled(bu, sw3, 0, ONE_MUL, LA)
        # g and u as the two stores would write them (bf16: half the registers from here on)
        _epilogue(accg.to(gl.bfloat16), accu.to(gl.bfloat16), pairs_ptr, rw_ptr, out_ptr,
                  num_pairs, col0, block * BM, stride_om, limit, ACT, MMA)

    @gluon.jit
    def _block(x_desc, w1_desc, w3_desc, w_s, xa_s, xb_s, full, empty, s1_words, s3_words,
               pairs_ptr, rw_ptr, out_ptr, num_pairs, row0, col0, block, num_steps, stride_om,
               limit, S: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
               ONE_MUL: gl.constexpr, PG: gl.constexpr, ACT: gl.constexpr,
               PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
        gl.warp_specialize([
            (_consumer, (w_s, xa_s, xb_s, full, empty, s1_words, s3_words, pairs_ptr, rw_ptr,
                         out_ptr, num_pairs, col0, block, num_steps, stride_om, limit, S, BM,
                         BN, ONE_MUL, PG, ACT)),
            (_producer, (x_desc, w1_desc, w3_desc, w_s, xa_s, xb_s, full, empty, row0,
                         block * BM, num_steps, S, BN)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])

    @gluon.jit
    def _w4a16_gated_kernel(x_desc, xh_desc, xq_desc, w1_desc, w3_desc, s1_ptr, s3_ptr,
                            pairs_ptr, block_expert_ptr, rw_ptr, out_ptr, num_pairs, I, K,
                            stride_se, stride_sn4, stride_om, limit, S: gl.constexpr,
                            BM: gl.constexpr, ONE_MUL: gl.constexpr, PARTS: gl.constexpr,
                            PG: gl.constexpr, ACT: gl.constexpr,
                            PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                            num_warps: gl.constexpr):
        # program (feature tile, block); a block multiplies the first quarter, half, or all of
        # its BM slots, whichever holds its pairs (three quarters run as the whole block)
        tile = gl.program_id(0)
        block = gl.program_id(1)
        expert = gl.load(block_expert_ptr + block)
        if expert >= 0:
            num_steps = K // 128
            row0 = tile_row0(expert * I + tile * 64, num_steps, _TILE)
            w_s = gl.allocate_shared_memory(gl.uint8, [2 * S, 64, 64], w1_desc.layout)
            xa_s = gl.allocate_shared_memory(gl.bfloat16, [S, BM, 64], x_desc.layout)
            xb_s = gl.allocate_shared_memory(gl.bfloat16, [S, BM, 64], x_desc.layout)
            full = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
            empty = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
            for b in gl.static_range(S):
                mbarrier.init(full.index(b), count=1)
                mbarrier.init(empty.index(b), count=1)
            s1_words = base.scale_words(s1_ptr, expert, tile, stride_se, stride_sn4, 64, PG)
            s3_words = base.scale_words(s3_ptr, expert, tile, stride_se, stride_sn4, 64, PG)
            used = base.parts_used(pairs_ptr, block, num_pairs, BM, PARTS)
            col0 = tile * 64
            if PARTS == 4 and used == 1:
                _block(xq_desc, w1_desc, w3_desc, w_s, xa_s, xb_s, full, empty, s1_words,
                       s3_words, pairs_ptr, rw_ptr, out_ptr, num_pairs, row0, col0, block,
                       num_steps, stride_om, limit, S, BM, BM // 4, ONE_MUL, PG, ACT,
                       PRODUCER_WARPS, PRODUCER_REGS)
            elif PARTS >= 2 and used * (4 // PARTS) == 2:
                _block(xh_desc, w1_desc, w3_desc, w_s, xa_s, xb_s, full, empty, s1_words,
                       s3_words, pairs_ptr, rw_ptr, out_ptr, num_pairs, row0, col0, block,
                       num_steps, stride_om, limit, S, BM, BM // 2, ONE_MUL, PG, ACT,
                       PRODUCER_WARPS, PRODUCER_REGS)
            else:
                _block(x_desc, w1_desc, w3_desc, w_s, xa_s, xb_s, full, empty, s1_words,
                       s3_words, pairs_ptr, rw_ptr, out_ptr, num_pairs, row0, col0, block,
                       num_steps, stride_om, limit, S, BM, BM, ONE_MUL, PG, ACT,
                       PRODUCER_WARPS, PRODUCER_REGS)
            for b in gl.static_range(S):
                mbarrier.invalidate(full.index(b))
                mbarrier.invalidate(empty.index(b))


def w4a16_gated_swiglu_gemm(tokens: torch.Tensor, w1: torch.Tensor, s1: torch.Tensor,
                            w3: torch.Tensor, s3: torch.Tensor, route_w: torch.Tensor,
                            limit: float, sorted_pairs: torch.Tensor, block_expert: torch.Tensor,
                            num_pairs: int, block_m: int, one_mul: bool = False,
                            parts: int | None = None, out: torch.Tensor | None = None
                            ) -> torch.Tensor:
    """h's Q8_32 values (len(sorted_pairs), I) bf16 in the down GEMM's token order (slot i =
    pair sorted_pairs[i], each 32-column group permuted; padding slots unwritten): the bits of
    ``w4a16_prefill_gemm`` for w1 and for w3 (bf16 outputs) followed by
    ``moe_swiglu.swiglu_fake_q8_slots`` (bf16 activations). Arguments as those calls'."""
    assert HAS_GLUON, "w4a16_gated_swiglu_gemm needs triton's Gluon"
    num_experts, inter, half = w1.shape
    k = half * 2
    assert w3.shape == w1.shape and s1.shape == s3.shape and s1.stride() == s3.stride()
    assert k % base.BLOCK_K == 0 and inter % TILE_ROWS == 0 and tokens.shape[1] == k
    assert block_m in (32, 64, 128, 256) and tokens.shape[0] == sorted_pairs.numel()
    assert tokens.dtype == torch.bfloat16 and tokens.is_contiguous() and s1.stride(1) % 4 == 0
    parts = base.PARTS if parts is None else parts
    assert parts in (1, 2, 4), f"w4a16_gated_swiglu_gemm: parts {parts} (1, 2 or 4)"
    slots = sorted_pairs.numel()
    if out is None:
        out = torch.empty((slots, inter), dtype=torch.bfloat16, device=tokens.device)
    assert out.shape == (slots, inter) and out.dtype == torch.bfloat16 and out.is_contiguous()
    assert out.numel() < 2**31, "w4a16_gated_swiglu_gemm: int32 output offsets"
    rw = route_w.reshape(-1).to(torch.float32).contiguous()
    grid = (inter // FEATURES, block_expert.numel())
    _w4a16_gated_kernel[grid](
        base.token_descriptor(tokens, block_m), base.token_descriptor(tokens, block_m // 2),
        base.token_descriptor(tokens, block_m // 4), tiled_descriptor(w1, FEATURES),
        tiled_descriptor(w3, FEATURES), s1, s3, sorted_pairs, block_expert, rw, out,
        num_pairs, inter, k, s1.stride(0), s1.stride(1) // 4, out.stride(0), float(limit),
        S=STAGES, BM=block_m, ONE_MUL=one_mul, PARTS=parts, PG=base.group_layout(1, 1),
        ACT=ACT_BF16, PRODUCER_WARPS=ws.PRODUCER_WARPS, PRODUCER_REGS=PRODUCER_REGS,
        num_warps=4, maxnreg=ws.launch_regs(1))
    return out


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases: BM 128 and 64, both decodes, parts 4."""
    cases = []
    for bm, one_mul in ((128, True), (64, False)):
        cases.append({"id": f"w4a16_gated_bm{bm}_{'one' if one_mul else 'two'}",
                      "gluon": True, "module": __name__, "kernel": "_w4a16_gated_kernel",
                      "signature": {"x_desc": f"tma:bf16:128:{bm}x64",
                                    "xh_desc": f"tma:bf16:128:{bm // 2}x64",
                                    "xq_desc": f"tma:bf16:128:{bm // 4}x64",
                                    "w1_desc": "tma:u8:0:64x64", "w3_desc": "tma:u8:0:64x64",
                                    "s1_ptr": "*u8", "s3_ptr": "*u8", "pairs_ptr": "*i32",
                                    "block_expert_ptr": "*i32", "rw_ptr": "*fp32",
                                    "out_ptr": "*bf16", "num_pairs": "i32", "I": "i32",
                                    "K": "i32", "stride_se": "i32", "stride_sn4": "i32",
                                    "stride_om": "i32", "limit": "fp32"},
                      "constexprs": {"S": STAGES, "BM": bm, "ONE_MUL": one_mul, "PARTS": 4,
                                     "PG": {"call": "group_layout", "args": [1, 1]},
                                     "ACT": ACT_BF16, "PRODUCER_WARPS": ws.PRODUCER_WARPS,
                                     "PRODUCER_REGS": PRODUCER_REGS, "num_warps": 4},
                      "num_warps": 4, "num_stages": 1, "no_spill": True,
                      # BN 128's epilogue (once a program, not the K loops) spills up to 72 B
                      # on triton 3.6 at the two-programs-per-SM cap
                      "max_stack": 96 if bm == 128 else 0,
                      "maxnreg": ws.launch_regs(1), "expect_wgmma": True,
                      "divisible": ["K", "I"]})
    return cases


group_layout = base.group_layout  # the consumer's weight words in registers (compile gate)
