"""Prefill expert GEMM with bf16 tensor cores over MXFP4 weights in the W4A8 kernel order, in
Gluon (SM90 only): the weights are decoded to exactly scaled bf16 in the wgmma register-A
layout, so the K loop has no per-group promotion. The engine's prefill path on the W4A8 layout
since session 15 (``moe_experts.run_experts``). The FP8 prefill kernel
(``moe_gluon_w4a8_prefill``) was removed in session 42 (measured slower: H200 round 71a, 8.18 vs
11.21 ms at 4K tokens), code at commit ad9ad7b.

    out[p, o] = sum over K of W_e[o, k] * x[p, k]      (p: the block's pairs, sorted by expert)

Why: the FP8 prefill kernel (``moe_gluon_w4a8_prefill``) had to promote every 32-K group's
accumulator (the weight and token scales change per 32 K): 2 instructions per accumulator
element and group, twice the FP8 tensor time at any token tile — it ran at 13-16 % of the FP8
peak (~190 TFLOP/s, 54.6 % of the 4K prefill in session 14). Here a weight costs a fixed ~2.5
instructions (its decode, shared by the tile's tokens) and the fp32 accumulator runs through
the whole K loop:

  * Per 32-bit word of the W4A8 order (row r, group G, quad lane q; ``mxfp4_w4a8_order``):
    ``EXTRACT`` then ``SCALE_ONE_MUL`` / ``SCALE_TWO_MUL`` build four bf16x2 registers, the lo
    values (K = 32 G + 4 q + b) from masks and one multiply / shift, the hi values (K = 32 G +
    16 + 4 q + b) after the FP8 kernel's rotations; bf16 bits s | e1 e0 m << 6 are value *
    2^-126 (e2m1's subnormal 0.5 lands on bf16's), then one bf16x2 FMA by 2^(S - 1)
    (``ONE_MUL``: every scale byte S <= 128, the owner vouching via ``scale_max``) or two
    (2^126, then 2^(S - 127)).
    Exact. The PTX and its torch twin live in ``mxfp4_w4a8_bf16``.
  * The decoded registers ARE the wgmma A fragment of one k32 group once K is permuted inside
    each group: the A operand's column v holds K_off(v) = v3 + 2 v0 + 4 v1 + 8 v2 + 16 v4
    (``mxfp4_w4a8_bf16.k_permutation``), and the token tile is gathered in that order
    (``gather_tokens``; padding slots are not written: a token only reaches its own
    accumulator column), so
    sum_v A[r, v] B[v, t] is the product. No shuffles (the compile gate checks the PTX).
  * Both operands by TMA, each into its own ring (tokens STAGES deep, weights WEIGHT_STAGES):
    the weight tile [64 WG rows, 64 bytes] (a 128-K step: one contiguous run of the order's
    step tiles; carried as int32 words: bytes
    carried over the loop's back edge cost an unpack and repack each) and the token tile as two
    [BM, 64] bf16 boxes (128-byte swizzle). Pipelined per 32-K group: while a group's wgmma (m64
    nBM k32 per warpgroup) runs, the next group's bits are extracted; after the wait they are
    scaled and issued (session 17, rounds 82-84: no faster than decoding a whole step after the
    wait, within the runs' noise, in 112 registers instead of 127; the bound at 4K tokens is
    the token tiles' L2 reads per FLOP, docs/performance.md). WG warpgroups share one token
    tile. ``PARTS``: a block runs the loop at N = the parts of BM (halves, quarters, eighths)
    that hold pairs (each N its own copy of the loop, ``_run_block``; 3 of 4 quarters as two
    accumulators, N = BM / 2 + BM / 4, fed by the same registers). ``REP`` 2: a warpgroup
    holds two A fragments (64 rows each, one [128, 32] operand: two wgmmas per k16) against
    the same token slice, so the step's bookkeeping (TMA issue, barriers, waits, descriptors)
    is paid once for 128 rows — 4.5 instructions per weight instead of 5.4 in the sm_90 SASS,
    at 208 registers; the pipeline runs it (one warpgroup) up to ``REP_MAX_PAIRS_PER_EXPERT``
    (session 27, rounds 153-154: 1-16 % faster at 2K / 4K tokens, slower at 8K). The same
    bits either way.
  * Grid: (O / (64 WG REP) tiles, blocks) with the tiles fastest, so one block's token tile (BM x
    K bf16) comes from HBM once and from L2 for its other tiles; an expert's second block is
    adjacent (its weight tiles hit L2).
  * H200 (rounds 70a-72a, 384 experts, top-6, whole pipeline): 7.64 vs 11.03 ms (FP8) at 4K
    tokens, 19.7 vs 36.1 at 16K; 276 / 428 TFLOP/s on the gated GEMM counting real pairs. The
    decode (~2.5 instructions per weight per tile) and the shared-memory traffic (each wgmma
    re-reads its B tile per 64 weight rows) bound it; 4 warpgroups per token tile were slower.

Shapes: tokens (num_blocks * BM, K) bf16, gathered and permuted (``gather_tokens``); w (E, O,
K/2) uint8 in ``moe_gluon_w4a8.to_kernel_order``; ws (E, O, K/32) uint8; sorted_pairs
(num_blocks * BM,) int32 (padding = num_pairs); block_expert (num_blocks,) int32 (-1 idle); out
(num_pairs, O) any float dtype. Reference: ``moe_gluon.reference_grouped`` on the Q8_32 values
(tests/gpu/test_moe_gluon_gpu.py).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.mxfp4_w4a8_order import TILE_ROWS
from deepinfer.kernels.triton.launch_math import cdiv
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON
from deepinfer.kernels.triton.moe_gluon_w4a8 import tiled_descriptor
from deepinfer.kernels.triton.moe_swiglu import a_operand_order
from deepinfer.kernels.triton.mxfp4_w4a8_bf16 import EXTRACT, SCALE_ONE_MUL, SCALE_TWO_MUL

ROWS = 64  # weight rows per program: one warpgroup, the wgmma M side
BLOCK_K = 128  # K per pipeline step: 4 groups of 32 (one 64-byte box of the W4A8 order)
# the token gather: slots per program and columns per loop step (session 15's one slot x 1,024
# columns per program took 2.9 ms of the 4K prefill: ~74K slots x 5 programs, most of them
# padding)
GATHER_SLOTS = 8
GATHER_BLOCK_K = 512
GATHER_WARPS = 4
# H200, bench/moe_gluon_prefill.py (rounds 70a / 71a; 384 experts, top-6, whole pipeline):
# BM 128, 2 stages, 2 warpgroups 8.18 ms at 4K tokens (the FP8 kernel: 11.21), 19.72 at 16K
# (36.50); BM 64: 8.35-9.14 / 24.8-26.0; 4 warpgroups 9.3-11.0 / 21.4-30.4
BLOCK_M = 128  # pairs per program (wgmma N; 128 beat 64 at 4K and 16K tokens)
STAGES = 2  # token ring depth
# weight ring depth: the weight tiles (8 KB a step at 2 warpgroups) have a ring of their own,
# so they can arrive further ahead than the token tiles (32 KB) that fill shared memory. H200
# round 84 (4K tokens, one run): 2 / 3 / 4 stages 1.82-1.90 / 1.85-2.12 / 1.84-2.01 ms per
# GEMM, the same within the run's noise (4 stages twice: 1.99 and 1.84 ms): 2, the least memory
WEIGHT_STAGES = 2
WARPGROUPS = 2  # warpgroups per program (64 weight rows each, one token tile)
# a block's N in parts of BM: 1 (always BM), 2 (BM / 2 when its second half is padding: at 4K
# tokens ~half the experts' blocks, session 15), 4 (quarters; at 4K tokens ~64 pairs per expert,
# about half the blocks hold 65-96 pairs). H200 round 76a, whole pipeline at BM 128: parts 1 /
# 2 / 4 7.24 / 6.83 / 6.67 ms at 4K tokens, 19.67 / 18.46 / 17.51 at 16K (the 4K prefill end to
# end: 111.3 vs 110.3 ms, inside the run-to-run spread). 8 (eighths, from BM 128; session 34):
# a block of 65-80 pairs runs N = 64 + 16 instead of 64 + 32 — at 4K tokens (~64 +- 8 pairs an
# expert) the padded tensor work falls from ~1.23 to ~1.12 times the pairs'
# (``bench/moe_parts_padding.py``); the same bits. H100 round 175: the 4K pipeline 1.5-3.1 %
# faster; level end to end (round 172, +0.1 %); the default since its GPU bit checks (every
# eighth fill, both kernels: H100 round 177, session 36) passed
PARTS = 8
# steps with at most this many pairs per expert on average run one warpgroup with two A
# fragments (``rep`` 2: 128 weight rows on one warpgroup, the per-step bookkeeping once for
# both; the same bits). H200 round 153 (session 27), ms per call, 2 warpgroups x 64 rows / 1 x
# 128: 1K tokens (16 pairs per expert) gated 1.590 / 1.453, down 1.600 / 1.513; 4K (64) gated
# 1.897 / 1.802, down 1.999 / 1.921; 8K (128) gated 2.844 / 3.451, down 3.023 / 3.254 — its
# 208 registers (BN 128) leave 8 warps per SM, which loses once most blocks are full. Round
# 154 at the engine's BM 64 (up to 32 pairs per expert): 1K 1.272 / 1.269 gated, 2K 1.560 /
# 1.396 gated, 1.599 / 1.349 down. 0: off
REP_MAX_PAIRS_PER_EXPERT = 64
# the kernel the pipeline launches, read at the call: "base" (this module's), "ws" (the same
# loop with its TMA issue on a producer warp: ``moe_gluon_w4a16_prefill_ws``; the same bits) or
# "auto": ws for the one-warpgroup REP 2 programs, base for the rest. H200 rounds 156-157
# (session 28), ms per call gated / down, base vs ws: 4K tokens (BM 128) 1.669 / 1.754 vs
# 1.519 / 1.684, 1.641 / 1.924 vs 1.606 / 1.837, 1.841 / 1.923 vs 1.637 / 1.775, 1.805 / 1.881
# vs 1.568 / 1.841; 1K / 2K (BM 64) level (1.160 / 1.270 vs 1.174 / 1.222, 1.322 / 1.318 vs
# 1.305 / 1.379); 8K on two warpgroups of one fragment: ws slower (2.616 / 2.807 vs 3.016 /
# 3.291), its two warpgroups of two fragments level (2.627 / 2.884 vs 2.698 / 2.905)
KERNEL = "auto"
# the producer-warp kernel's gated GEMM with the SwiGLU as its epilogue (one launch for the
# gate and up projections, h's Q8_32 values written in the down GEMM's token order:
# ``moe_swiglu_epilogue``; the same bits as two GEMMs and ``swiglu_fake_q8_slots``), read at
# the call; only where that kernel runs one warpgroup of two fragments on bf16 activations.
# On since session 43 with the epilogue's octet layout (``moe_swiglu_epilogue.MODE`` 4), H100,
# µs a call against the two GEMMs + SwiGLU apart (the same bits): the 4K shape (384 experts,
# bench/gated_swiglu.py) 3,096 vs 3,311 (-6.5 %; the lane layout 3,299, the quad 3,116);
# 1,024 tokens of 32 skewed experts (tests/gpu) 596 / 587 vs 611 / 623 at BM 128 (eighths /
# quarters), 753 vs 781 at BM 64. The lane layout (sessions 41-42) was 4-10 % slower than
# apart: its epilogue's ~300 µs a 4K call of shuffles and 2-byte stores (rounds 206-210).
# The lone 4K prompt's end-to-end A/B is still to run (bench/rounds/h200_round213.sh)
FUSED_SWIGLU = True
# the register cap per thread of the launches (None: ptxas's choice; 208 at REP 2, which holds
# two programs per SM), read at the call
MAXNREG: int | None = None

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

    _TILE = gl.constexpr(TILE_ROWS)  # rows per step tile of the W4A8 order
    _EXTRACT_ASM = gl.constexpr(EXTRACT)
    # the weight ring's stage as int32 words (the same bytes: unswizzled rows)
    _WORDS_SHARED = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    _ONE_MUL_ASM = gl.constexpr(SCALE_ONE_MUL)
    # a timing probe, never the engine's: True sends the weight words to the scale and the
    # wgmmas without the integer decode (wrong values): what the K loop costs without it. Set by
    # bench/moe_gluon_prefill.py --probe-no-decode before anything compiles, in its own process
    # (triton refuses a changed global after a compile).
    _NO_DECODE = gl.constexpr(False)
    _TWO_MUL_ASM = gl.constexpr(SCALE_TWO_MUL)
    # the eighths' tiles (``part_tiles(8, u, BM)`` for u = 1 .. 7): BN = BM >> _EIGHTHS_BOX,
    # from the token box of that index (x, xh, xq, xe); BN2 = _EIGHTHS_BN2 eighths, from box
    # _EIGHTHS_BOX2 (the first box again when there is none)
    _EIGHTHS_BOX = gl.constexpr((3, 2, 2, 1, 1, 1, 0))
    _EIGHTHS_BN2 = gl.constexpr((0, 0, 1, 0, 1, 2, 0))
    _EIGHTHS_BOX2 = gl.constexpr((3, 2, 3, 1, 3, 2, 0))

    @gluon.jit
    def _issue_w(w_desc, w_s, bars, row0, step, num_steps, STAGES: gl.constexpr,
                 WSTAGES: gl.constexpr, BO: gl.constexpr):
        """TMA of K step ``step``'s weight tile [BO, 64 B] into weight stage step % WSTAGES
        (barrier STAGES + that stage; none past the last step)."""
        st = step % WSTAGES
        ok = step < num_steps
        bar = bars.index(STAGES + st)
        mbarrier.expect(bar, BO * 64, pred=ok)
        tma.async_copy_global_to_shared(w_desc, [row0 + step * _TILE, 0], bar, w_s.index(st),
                                        pred=ok)

    @gluon.jit
    def _issue_x(x_desc, x2_desc, xa_s, xb_s, bars, x_row0, step, num_steps,
                 STAGES: gl.constexpr, BN: gl.constexpr, BN2: gl.constexpr):
        """TMA of K step ``step``'s BN (+ BN2) tokens (two [BN, 64] bf16 boxes into the first
        BN rows of the token tiles; BN2 > 0: two [BN2, 64] boxes of x2_desc below them) into
        token stage step % STAGES (barrier that stage; none past the last step)."""
        st = step % STAGES
        ok = step < num_steps
        bar = bars.index(st)
        mbarrier.expect(bar, (BN + BN2) * 128 * 2, pred=ok)
        tma.async_copy_global_to_shared(x_desc, [x_row0, step * 128], bar,
                                        xa_s.index(st).slice(0, BN, dim=0), pred=ok)
        tma.async_copy_global_to_shared(x_desc, [x_row0, step * 128 + 64], bar,
                                        xb_s.index(st).slice(0, BN, dim=0), pred=ok)
        if BN2 > 0:
            tma.async_copy_global_to_shared(x2_desc, [x_row0 + BN, step * 128], bar,
                                            xa_s.index(st).slice(BN, BN2, dim=0), pred=ok)
            tma.async_copy_global_to_shared(x2_desc, [x_row0 + BN, step * 128 + 64], bar,
                                            xb_s.index(st).slice(BN, BN2, dim=0), pred=ok)

    @gluon.jit
    def _multiplier(scale_word, g: gl.constexpr, ONE_MUL: gl.constexpr):
        """Group g's scale byte S of each row (byte g of its scale word) -> the decode's bf16x2
        multiplier (``mxfp4_w4a8_bf16.scale_multiplier``): (S + 126) or S, << 7, both
        halves."""
        sb = (scale_word >> (8 * g)) & 0xFF
        if ONE_MUL:
            sb = sb + 126
        return sb * 0x00800080

    @gluon.jit
    def _step_words(w_s, stage, LW: gl.constexpr):
        """A K step's weight words from ring stage ``stage`` (word 4 q + G of a row: quad lane
        q, group G; one 16-byte load per row) as its 4 groups' words [BO, 4] int32 (column
        q), carried as whole registers (bytes carried across the loop's back edge cost a
        byte extract and repack each)."""
        BO: gl.constexpr = w_s.shape[1]
        words = w_s.index(stage)._reinterpret(gl.int32, [BO, 16], _WORDS_SHARED).load(LW)
        p = gl.reshape(words, [BO, 4, 2, 2])  # q, G1, G0
        p_even, p_odd = gl.split(p)  # G0 = 0 / 1
        p0, p2 = gl.split(p_even)
        p1, p3 = gl.split(p_odd)
        return p0, p1, p2, p3

    @gluon.jit
    def _extract(words):
        """A group's words [BO, 4] -> its unscaled bf16x2 bits (e, o, x, y: [BO, 4] int32 each):
        integer work only, so it may run while the wgmmas do."""
        if _NO_DECODE:
            return words, words, words, words
        return gl.inline_asm_elementwise(_EXTRACT_ASM, "=r,=r,=r,=r,r", [words],
                                         dtype=(gl.int32, gl.int32, gl.int32, gl.int32),
                                         is_pure=True, pack=1)

    @gluon.jit
    def _scaled(bits, scale_word, g: gl.constexpr, ONE_MUL: gl.constexpr, LA: gl.constexpr):
        """``_extract``'s bits of group g times its scale -> the A operand [BO, 32] bf16 (LA)
        whose column v holds K = 32 g + K_off(v)."""
        e, o, x, y = bits
        BO: gl.constexpr = e.shape[0]
        # the rows' multipliers in the words' row layout (the same registers)
        m = gl.convert_layout(_multiplier(scale_word, g, ONE_MUL),
                              gl.SliceLayout(1, e.type.layout))
        e, m = gl.broadcast(e, m[:, None])
        asm: gl.constexpr = _ONE_MUL_ASM if ONE_MUL else _TWO_MUL_ASM
        v = gl.inline_asm_elementwise(asm, "=h,=h,=h,=h,=h,=h,=h,=h,r,r,r,r,r",
                                      [e, o, x, y, m], dtype=(gl.bfloat16, ) * 8,
                                      is_pure=True, pack=1)
        # element j of a word's lo (t = 0) / hi (t = 1) values: j = 2 (register) + half;
        # [BO, 4] x (q, t, j1, j0) -> (row, q1, q0, j1, j0, t) -> column v = j0 + 2 q0 + 4 q1
        # + 8 j1 + 16 t (the order the pack-4 form of this asm had)
        lo = gl.join(gl.join(v[0], v[1]), gl.join(v[2], v[3]))  # [BO, 4, j0, j1]
        hi = gl.join(gl.join(v[4], v[5]), gl.join(v[6], v[7]))
        t = gl.join(lo, hi)  # [BO, 4, j0, j1, t]
        t = gl.reshape(t, [BO, 2, 2, 2, 2, 2])  # row, q1, q0, j0, j1, t
        t = gl.reshape(gl.permute(t, [0, 5, 4, 1, 2, 3]), [BO, 32])
        return gl.convert_layout(t, LA)

    @gluon.jit
    def _mma_group(a, x_t, acc, acc2, R0: gl.constexpr, BN: gl.constexpr,
                   BN2: gl.constexpr, C0: gl.constexpr):
        """The async wgmma of one 32-K group: acc += a @ x_t[R0 : R0 + BN, C0 : C0 + 32]^T
        (BN2 > 0: the same registers into acc2 against the next BN2 tokens)."""
        x_g = x_t.slice(C0, 32, dim=1)
        acc = warpgroup_mma(a, x_g.slice(R0, BN, dim=0).permute((1, 0)), acc, is_async=True)
        if BN2 > 0:
            LA2: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc2.type.layout,
                                                    k_width=2)
            acc2 = warpgroup_mma(gl.convert_layout(a, LA2),
                                 x_g.slice(R0 + BN, BN2, dim=0).permute((1, 0)), acc2,
                                 is_async=True)
        return acc, acc2

    @gluon.jit
    def _wait(acc, acc2, BN2: gl.constexpr):
        """Both accumulators waited (they cross the loop's back edge as plain registers:
        C7515, moe_gluon)."""
        if BN2 > 0:
            acc, acc2 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc2))
        else:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            acc2 = acc
        return acc, acc2

    @gluon.jit
    def _store(acc, pairs_ptr, out_ptr, num_pairs, row_lo, slot0, stride_om,
               MMA: gl.constexpr):
        """acc [BO, BN] (layout MMA: the wgmma's, or the producer-warp kernel's row stores')
        -> out rows pairs[slot0 + j] (the valid ones)."""
        BO: gl.constexpr = acc.shape[0]
        BN: gl.constexpr = acc.shape[1]
        v = acc.to(out_ptr.dtype.element_ty)
        rows_o = row_lo + gl.arange(0, BO, layout=gl.SliceLayout(1, MMA))
        pairs_o = gl.load(pairs_ptr + slot0 + gl.arange(0, BN, layout=gl.SliceLayout(0, MMA)))
        valid = pairs_o < num_pairs
        offs = (gl.where(valid, pairs_o, 0).to(gl.int64) * stride_om)[None, :] + rows_o[:, None]
        gl.store(out_ptr + offs, v, mask=valid[None, :] & (rows_o[:, None] >= 0))

    @gluon.jit
    def _run_block(x_desc, x2_desc, w_desc, w_s, xa_s, xb_s, bars, s_words, pairs_ptr,
                   out_ptr, num_pairs, row0, row_lo, block, num_steps, stride_om,
                   STAGES: gl.constexpr, WSTAGES: gl.constexpr, BM: gl.constexpr,
                   BN: gl.constexpr, BN2: gl.constexpr, ONE_MUL: gl.constexpr,
                   PG: gl.constexpr, REP: gl.constexpr, num_warps: gl.constexpr):
        """The K loop of one program against the first BN (+ BN2) tokens of its block (the
        rest is padding), and the store of the valid pairs. BN2 > 0: a second accumulator [BO,
        BN2] for tokens BN .. BN + BN2, fed by the same decoded A operands (N = 96 of 128 as
        64 + 32: power-of-two tiles).

        Pipelined per 32-K group: while group g's wgmmas run, the next group's bits are
        extracted (integer instructions); after the wait they are scaled (bf16x2 FMAs) and
        issued. A 128-K step's first group comes from the next ring stage, loaded during the
        step's last group."""
        BO: gl.constexpr = 16 * num_warps * REP
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                       warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BN, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        x_row0 = block * BM
        for b in gl.static_range(WSTAGES - 1):
            _issue_w(w_desc, w_s, bars, row0, b, num_steps, STAGES, WSTAGES, BO)
        for b in gl.static_range(STAGES - 1):
            _issue_x(x_desc, x2_desc, xa_s, xb_s, bars, x_row0, b, num_steps, STAGES, BN, BN2)
        sw = gl.load(s_words)  # step 0's scale words
        sw_next = gl.load(s_words + gl.minimum(num_steps - 1, 1))
        mbarrier.wait(bars.index(STAGES), 0)
        p0, p1, p2, p3 = _step_words(w_s, 0, PG)
        bits = _extract(p0)
        a = _scaled(bits, sw, 0, ONE_MUL, LA)

        acc = gl.zeros([BO, BN], gl.float32, MMA)
        acc2 = acc  # unused unless BN2 > 0
        if BN2 > 0:
            MMA2: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                            warps_per_cta=[num_warps, 1],
                                                            instr_shape=[16, BN2, 16])
            acc2 = gl.zeros([BO, BN2], gl.float32, MMA2)
        for i in range(num_steps):
            # every warp is past step i - 1 (its wgmmas waited, this step's bytes loaded): the
            # stages the TMAs below refill — tokens (i - 1) % STAGES, weights (i - 1) %
            # WSTAGES (read at the end of step i - 2) — are free
            cta_barrier()
            _issue_w(w_desc, w_s, bars, row0, i + WSTAGES - 1, num_steps, STAGES, WSTAGES, BO)
            _issue_x(x_desc, x2_desc, xa_s, xb_s, bars, x_row0, i + STAGES - 1, num_steps,
                     STAGES, BN, BN2)
            mbarrier.wait(bars.index(i % STAGES), (i // STAGES) & 1)
            xa = xa_s.index(i % STAGES)
            xb = xb_s.index(i % STAGES)
            acc, acc2 = _mma_group(a, xa, acc, acc2, 0, BN, BN2, 0)
            bits = _extract(p1)
            acc, acc2 = _wait(acc, acc2, BN2)
            a = _scaled(bits, sw, 1, ONE_MUL, LA)
            acc, acc2 = _mma_group(a, xa, acc, acc2, 0, BN, BN2, 32)
            bits = _extract(p2)
            acc, acc2 = _wait(acc, acc2, BN2)
            a = _scaled(bits, sw, 2, ONE_MUL, LA)
            acc, acc2 = _mma_group(a, xb, acc, acc2, 0, BN, BN2, 0)
            bits = _extract(p3)
            acc, acc2 = _wait(acc, acc2, BN2)
            a = _scaled(bits, sw, 3, ONE_MUL, LA)
            acc, acc2 = _mma_group(a, xb, acc, acc2, 0, BN, BN2, 32)
            # the next step's bytes (the last step reloads its own: a finished phase waits for
            # nothing), its first group extracted while this step's last group runs
            nxt = gl.minimum(i + 1, num_steps - 1)
            sw = sw_next
            sw_next = gl.load(s_words + gl.minimum(i + 2, num_steps - 1))
            mbarrier.wait(bars.index(STAGES + nxt % WSTAGES), (nxt // WSTAGES) & 1)
            p0, p1, p2, p3 = _step_words(w_s, nxt % WSTAGES, PG)
            bits = _extract(p0)
            acc, acc2 = _wait(acc, acc2, BN2)
            a = _scaled(bits, sw, 0, ONE_MUL, LA)
        _store(acc, pairs_ptr, out_ptr, num_pairs, row_lo, block * BM, stride_om, MMA)
        if BN2 > 0:
            _store(acc2, pairs_ptr, out_ptr, num_pairs, row_lo, block * BM + BN, stride_om, MMA2)

    @gluon.jit
    def scale_words(s_ptr, expert, tile, stride_se, stride_sn4, BO: gl.constexpr,
                    PG: gl.constexpr):
        """Pointers to the scale bytes of a thread's weight rows (layout PG's rows of the
        program's tile) as int32 words: a K step's 4 groups, step i at + i."""
        r_w = tile * BO + gl.arange(0, BO, layout=gl.SliceLayout(1, PG))
        return (s_ptr + expert.to(gl.int64) * stride_se
                + r_w.to(gl.int64) * (stride_sn4 * 4)).to(gl.pointer_type(gl.int32),
                                                          bitcast=True)

    @gluon.jit
    def _run_eighths(x_desc, xh_desc, xq_desc, xe_desc, w_desc, w_s, xa_s, xb_s, bars, s_words,
                     pairs_ptr, out_ptr, num_pairs, row0, row_lo, block, num_steps, stride_om,
                     used, STAGES: gl.constexpr, WSTAGES: gl.constexpr, BM: gl.constexpr,
                     ONE_MUL: gl.constexpr, PG: gl.constexpr, REP: gl.constexpr,
                     num_warps: gl.constexpr):
        """``_run_block`` at the N of ``used`` eighths of BM (``part_tiles``: one
        power-of-two tile or two, BN + BN2; 7 eighths run all of BM)."""
        descs = (x_desc, xh_desc, xq_desc, xe_desc)  # token boxes of BM >> i rows
        for u in gl.static_range(1, 8):
            if eighths_hit(used, u):
                _run_block(descs[_EIGHTHS_BOX[u - 1]], descs[_EIGHTHS_BOX2[u - 1]], w_desc,
                           w_s, xa_s, xb_s, bars, s_words, pairs_ptr, out_ptr, num_pairs, row0,
                           row_lo, block, num_steps, stride_om, STAGES, WSTAGES, BM,
                           BM >> _EIGHTHS_BOX[u - 1], _EIGHTHS_BN2[u - 1] * (BM // 8),
                           ONE_MUL, PG, REP, num_warps)

    @gluon.jit
    def eighths_hit(used, u: gl.constexpr):
        """Whether a block of ``used`` eighths runs the eighths' tile set u (1 .. 7: used ==
        u; 8 used eighths run as 7, the whole block)."""
        if u < 7:
            return used == u
        else:
            return used >= 7

    @gluon.jit
    def parts_used(pairs_ptr, block, num_pairs, BM: gl.constexpr, PARTS: gl.constexpr):
        """How many of the block's PARTS parts hold pairs: 1 .. PARTS (sorted pairs pad an
        expert's last block at its end: a part is used when its first slot is a pair)."""
        used = 1
        for q in gl.static_range(1, PARTS):
            used += (gl.load(pairs_ptr + block * BM + q * (BM // PARTS)) < num_pairs).to(
                gl.int32)
        return used

    @gluon.jit
    def _w4a16_prefill_kernel(x_desc, xh_desc, xq_desc, xe_desc, w_desc, s_ptr, pairs_ptr,
                              block_expert_ptr, out_ptr, num_pairs, O, K, stride_se,
                              stride_sn4, stride_om, STAGES: gl.constexpr,
                              WSTAGES: gl.constexpr, BM: gl.constexpr,
                              ONE_MUL: gl.constexpr, PARTS: gl.constexpr,
                              PG: gl.constexpr, REP: gl.constexpr,
                              num_warps: gl.constexpr):
        # PG (``group_layout``): the weight tile's int32 words [BO, 16] in registers. x_desc /
        # xh_desc / xq_desc / xe_desc: token boxes [BM, 64] / [BM / 2, 64] / [BM / 4, 64] /
        # [BM / 8, 64]. PARTS (1, 2, 4, 8): a block runs N = the parts of BM that hold pairs
        # (sorted pairs pad each expert's last block at its end) as ``part_tiles`` says: 2: BM
        # / 2 or BM; 4: BM / 4, BM / 2, 3 BM / 4 (two accumulators) or BM; 8: eighths the same
        # way (7 / 8 of BM: all of it)
        # 64 REP weight rows per warpgroup (REP A fragments per group), one token tile
        BO: gl.constexpr = 16 * num_warps * REP
        tile = gl.program_id(0)
        block = gl.program_id(1)
        expert = gl.load(block_expert_ptr + block)
        if expert >= 0:
            gl.static_assert(_TILE % BO == 0, "a weight box within one step tile")
            num_steps = K // 128
            row0 = tile_row0(expert * O + tile * BO, num_steps, _TILE)  # step tiles
            w_s = gl.allocate_shared_memory(gl.uint8, [WSTAGES, BO, 64], w_desc.layout)
            xa_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BM, 64], x_desc.layout)
            xb_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BM, 64], x_desc.layout)
            # barriers: the token stages, then the weight stages
            bars = gl.allocate_shared_memory(gl.int64, [STAGES + WSTAGES, 1],
                                             mbarrier.MBarrierLayout())
            for b in gl.static_range(STAGES + WSTAGES):
                mbarrier.init(bars.index(b), count=1)
            s_words = scale_words(s_ptr, expert, tile, stride_se, stride_sn4, BO, PG)
            used = parts_used(pairs_ptr, block, num_pairs, BM, PARTS)
            if PARTS == 8:
                _run_eighths(x_desc, xh_desc, xq_desc, xe_desc, w_desc, w_s, xa_s, xb_s, bars,
                             s_words, pairs_ptr, out_ptr, num_pairs, row0, tile * BO, block,
                             num_steps, stride_om, used, STAGES, WSTAGES, BM, ONE_MUL, PG,
                             REP, num_warps)
            elif PARTS == 4:
                if used == 1:
                    _run_block(xq_desc, xq_desc, w_desc, w_s, xa_s, xb_s, bars, s_words,
                               pairs_ptr, out_ptr, num_pairs, row0, tile * BO, block, num_steps,
                               stride_om, STAGES, WSTAGES, BM, BM // 4, 0,
                               ONE_MUL, PG, REP, num_warps)
                elif used == 2:
                    _run_block(xh_desc, xh_desc, w_desc, w_s, xa_s, xb_s, bars, s_words,
                               pairs_ptr, out_ptr, num_pairs, row0, tile * BO, block, num_steps,
                               stride_om, STAGES, WSTAGES, BM, BM // 2, 0,
                               ONE_MUL, PG, REP, num_warps)
                elif used == 3:  # BM / 2 + BM / 4 (two accumulators)
                    _run_block(xh_desc, xq_desc, w_desc, w_s, xa_s, xb_s, bars, s_words,
                               pairs_ptr, out_ptr, num_pairs, row0, tile * BO, block, num_steps,
                               stride_om, STAGES, WSTAGES, BM, BM // 2, BM // 4, ONE_MUL, PG,
                               REP, num_warps)
                else:
                    _run_block(x_desc, x_desc, w_desc, w_s, xa_s, xb_s, bars, s_words,
                               pairs_ptr, out_ptr, num_pairs, row0, tile * BO, block, num_steps,
                               stride_om, STAGES, WSTAGES, BM, BM, 0, ONE_MUL, PG, REP,
                               num_warps)
            elif PARTS == 2:
                if used == 1:
                    _run_block(xh_desc, xh_desc, w_desc, w_s, xa_s, xb_s, bars, s_words,
                               pairs_ptr, out_ptr, num_pairs, row0, tile * BO, block, num_steps,
                               stride_om, STAGES, WSTAGES, BM, BM // 2, 0,
                               ONE_MUL, PG, REP, num_warps)
                else:
                    _run_block(x_desc, x_desc, w_desc, w_s, xa_s, xb_s, bars, s_words,
                               pairs_ptr, out_ptr, num_pairs, row0, tile * BO, block, num_steps,
                               stride_om, STAGES, WSTAGES, BM, BM, 0, ONE_MUL, PG, REP,
                               num_warps)
            else:
                _run_block(x_desc, x_desc, w_desc, w_s, xa_s, xb_s, bars, s_words, pairs_ptr,
                           out_ptr, num_pairs, row0, tile * BO, block, num_steps, stride_om,
                           STAGES, WSTAGES, BM, BM, 0, ONE_MUL, PG, REP, num_warps)
            for b in gl.static_range(STAGES + WSTAGES):
                mbarrier.invalidate(bars.index(b))

    def token_descriptor(tokens: torch.Tensor, block_m: int):
        """TMA descriptor of the gathered bf16 tokens (rows, K): boxes [BM, 64], 128-byte
        swizzle (the wgmma B operand's shared layout)."""
        return TensorDescriptor(tokens, list(tokens.shape), list(tokens.stride()),
                                [block_m, 64], _token_layout())

    @functools.cache
    def _token_layout():
        return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)


@triton.jit
def _gather_tokens_kernel(x_ptr, pairs_ptr, out_ptr, num_pairs, num_slots, K, row_div,
                          stride_x, stride_o, SLOTS: tl.constexpr, BLOCK_K: tl.constexpr):
    """Rows ``slot`` of out = x[pairs[slot] // row_div] for SLOTS slots per program, looping
    over K in BLOCK_K columns, with the columns of each 32-K group in the A operand's order
    (out[32 G + v] = x[32 G + K_off(v)]); padding slots are not written (their tokens only
    reach their own accumulator columns, which are never stored). Contiguous loads and stores;
    the permutation is a register reshape (``moe_swiglu.a_operand_order``)."""
    slots = tl.program_id(0) * SLOTS + tl.arange(0, SLOTS)
    pairs = tl.load(pairs_ptr + slots, mask=slots < num_slots, other=num_pairs)
    live = pairs < num_pairs
    if tl.max(live.to(tl.int32), axis=0) > 0:
        rows = (tl.where(live, pairs, 0) // row_div).to(tl.int64)
        src = x_ptr + rows[:, None] * stride_x
        dst = out_ptr + slots.to(tl.int64)[:, None] * stride_o
        for k0 in range(0, K, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            ok = live[:, None] & (cols < K)[None, :]
            vals = a_operand_order(tl.load(src + cols[None, :], mask=ok), SLOTS, BLOCK_K)
            tl.store(dst + cols[None, :], vals, mask=ok)


def gather_tokens(x: torch.Tensor, sorted_pairs: torch.Tensor, num_pairs: int,
                  row_div: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """x (rows, K) bf16 (the Q8_32 values) -> (len(sorted_pairs), K) bf16: slot i = row
    sorted_pairs[i] // row_div of x, K permuted inside each 32-K group as the decoded weights
    are (``mxfp4_w4a8_bf16.k_permutation``); padding slots (sorted_pairs[i] >= num_pairs) are
    left unwritten (in ``out`` when given: contiguous, that shape and dtype). ``GATHER_SLOTS``
    slots per program (a program of padding only exits)."""
    assert x.dim() == 2 and x.shape[1] % 32 == 0 and x.stride(1) == 1, x.shape
    slots, k = sorted_pairs.numel(), x.shape[1]
    if out is None:
        out = torch.empty((slots, k), dtype=x.dtype, device=x.device)
    assert out.shape == (slots, k) and out.dtype == x.dtype and out.is_contiguous(), out.shape
    if slots:
        _gather_tokens_kernel[(cdiv(slots, GATHER_SLOTS),)](
            x, sorted_pairs, out, num_pairs, slots, k, row_div, x.stride(0), out.stride(0),
            SLOTS=GATHER_SLOTS, BLOCK_K=GATHER_BLOCK_K, num_warps=GATHER_WARPS)
    return out


def w4a16_prefill_gemm(tokens: torch.Tensor, w: torch.Tensor, s: torch.Tensor,
                       sorted_pairs: torch.Tensor, block_expert: torch.Tensor, num_pairs: int,
                       out: torch.Tensor, block_m: int, stages: int = STAGES,
                       one_mul: bool = False, warpgroups: int = WARPGROUPS,
                       parts: int | None = None, weight_stages: int | None = None,
                       rep: int = 1, maxnreg: int | None = None) -> torch.Tensor:
    """out[pair] (num_pairs, O; its dtype) = x[pair] @ W[expert]^T for the pairs a block holds,
    the fp32 sums rounded once. tokens: ``gather_tokens`` for these pairs (num_blocks * block_m
    rows); w (E, O, K/2) in ``moe_gluon_w4a8.to_kernel_order``, s (E, O, K/32) uint8; pairs
    grouped by ``moe_align.align_pairs(ids, E, block_m)``. ``one_mul``: every scale byte is <=
    128 (one bf16 multiply per weight pair instead of two). ``warpgroups`` (1 or 2) x 64 weight
    rows per program share its token tile. ``parts`` (1, 2, 4, 8): a block multiplies only its parts
    of block_m / parts tokens that hold pairs (``part_tiles``; default ``PARTS``, read at the
    call; 8 from block_m 128, below it 4).
    ``weight_stages``: the weight ring's depth (default ``WEIGHT_STAGES``, read at the call).
    ``rep`` (1 or 2): A fragments per warpgroup and group (64 rep weight rows a warpgroup, one
    accumulator of 64 rep rows), the per-step bookkeeping paid once for them. ``maxnreg``:
    the launch's register cap per thread (None: the compiler's choice)."""
    assert HAS_GLUON, "w4a16_prefill_gemm needs triton's Gluon"
    num_experts, out_features, half = w.shape
    k = half * 2
    rows = ROWS * warpgroups * rep
    assert k % BLOCK_K == 0 and out_features % TILE_ROWS == 0 and tokens.shape[1] == k
    assert TILE_ROWS % rows == 0, (warpgroups, TILE_ROWS)  # a weight box within a step tile
    assert block_m in (32, 64, 128, 256) and tokens.shape[0] == sorted_pairs.numel()
    parts = launch_parts(PARTS if parts is None else parts, block_m)
    weight_stages = WEIGHT_STAGES if weight_stages is None else weight_stages
    assert tokens.dtype == torch.bfloat16 and tokens.is_contiguous() and s.stride(1) % 4 == 0
    grid = (out_features // rows, block_expert.numel())
    _w4a16_prefill_kernel[grid](
        token_descriptor(tokens, block_m), token_descriptor(tokens, block_m // 2),
        token_descriptor(tokens, block_m // 4), token_descriptor(tokens, eighth_rows(block_m)),
        tiled_descriptor(w, rows), s, sorted_pairs,
        block_expert, out, num_pairs, out_features, k, s.stride(0), s.stride(1) // 4,
        out.stride(0), STAGES=stages, WSTAGES=weight_stages, BM=block_m, ONE_MUL=one_mul,
        PARTS=parts,
        PG=group_layout(warpgroups, rep), REP=rep, num_warps=4 * warpgroups,
        **({"maxnreg": maxnreg} if maxnreg else {}))
    return out


@functools.cache
def warp_rows(warpgroups: int) -> tuple[tuple[int, int], ...]:
    """The row bases of a program's warps (16 rows each; warpgroups stacked by 64); a tuple:
    launch constexprs are hashed."""
    return tuple((16 << b, 0) for b in range(2 + (warpgroups - 1).bit_length()))


@functools.cache
def group_layout(warpgroups: int, rep: int = 1):
    """The weight tile's int32 words [64 WG rep, 16] (word 4 q + G of a row: quad lane q,
    group G) in registers: a thread's 4 words of rows r and r + 8 (one 16-byte shared load per
    row; rep 2: and of rows r + 64 WG, r + 64 WG + 8), lanes q and g, warps 16 rows each (the
    wgmma A layout of 4 WG warps along M, repeated). Built here as lists of lists (inside a
    jit function a literal's inner lists become tuples, and layouts derived from it stop
    comparing equal: linear_wide's ``operand_layout``); once per shape (a build validates the
    layout: ~0.1 ms of host time per launch, two launches a prefill layer — round 234)."""
    assert rep in (1, 2), rep
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0]] + ([[64 * warpgroups, 0]] if rep == 2 else []),
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[list(w) for w in warp_rows(warpgroups)], block_bases=[],
        shape=[64 * warpgroups * rep, 16])


def part_tiles(parts: int, used: int, block_m: int) -> tuple[int, int]:
    """(BN, BN2): the token rows a block's program multiplies when ``used`` of its ``parts``
    parts (block_m / parts rows each) hold pairs — the kernels' dispatch. The rows needed as
    one power-of-two tile (BN2 0) or two (BN + BN2: a second accumulator fed by the same
    decoded registers; Gluon's tiles are powers of two), else all of block_m (three tiles,
    e.g. 7 / 8: the whole block)."""
    assert parts in (1, 2, 4, 8) and 1 <= used <= parts, (parts, used)
    rows = used * (block_m // parts)
    bn = 1 << (rows.bit_length() - 1)  # the largest power of two <= rows
    rest = rows - bn
    if rest == 0:
        return bn, 0
    if rest & (rest - 1) == 0:
        return bn, rest
    return block_m, 0


def launch_parts(parts: int, block_m: int) -> int:
    """The parts a launch runs: ``parts`` (1, 2, 4 or 8), eighths only from block_m 128 (an
    eighth of 64 pairs is 8 tokens, a tile the kernels are not compiled for: 4 there)."""
    assert parts in (1, 2, 4, 8), f"moe_gluon_w4a16_prefill: parts {parts} (1, 2, 4 or 8)"
    return 4 if parts == 8 and block_m < 128 else parts


def eighth_rows(block_m: int) -> int:
    """Rows of the eighths' token box (unused below block_m 128, where it is 8 rows)."""
    return max(block_m // 8, 8)


def fitting_warpgroups(out_features: list[int], warpgroups: int = WARPGROUPS) -> int | None:
    """The most warpgroups per program, at most ``warpgroups``, whose 64 x WG weight rows tile
    every projection's output features; None when not even 64 does."""
    wg = warpgroups
    while wg >= 1 and any(o % (ROWS * wg) for o in out_features):
        wg //= 2
    return wg if wg >= 1 else None


def program_shape(out_features: list[int], pairs_per_expert: float, warpgroups: int,
                  rep: int | None = None) -> tuple[int, int]:
    """(warpgroups, rep) of a call's programs: ``rep`` given, or 2 when the step holds at most
    ``REP_MAX_PAIRS_PER_EXPERT`` pairs per expert on average (read at the call) — one
    warpgroup of 2 x 64 rows in place of ``warpgroups`` x 64, when 128 rows tile every
    projection — else 1 with ``warpgroups`` as given."""
    if rep is None:
        rep = 2 if 0 < pairs_per_expert <= REP_MAX_PAIRS_PER_EXPERT else 1
    assert rep in (1, 2), f"program_shape: rep {rep} (1 or 2)"
    if rep == 2 and all(o % (2 * ROWS) == 0 for o in out_features):
        return 1, 2
    return warpgroups, 1


def accepts(w1, w3, w2) -> bool:
    """Whether the three projections' stacks fit the kernel: K (in features) a multiple of 128
    (the W4A8 order's step) and output features a multiple of 64."""
    from deepinfer.kernels.triton.moe_experts import _weight_args

    shapes = [_weight_args(w)[0].shape for w in (w1, w3, w2)]
    return (all(2 * half % BLOCK_K == 0 for _, _, half in shapes)
            and fitting_warpgroups([o for _, o, _ in shapes]) is not None)


def run_experts_w4a16_prefill(x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor,
                              w1, w3, w2, limit: float, combine_ids: torch.Tensor | None = None,
                              stages: int = STAGES, block_m: int | None = None,
                              warpgroups: int = WARPGROUPS, parts: int | None = None,
                              combine: bool = True, rep: int | None = None,
                              x_rounded: bool = False) -> torch.Tensor:
    """The routed experts at prefill sizes with this kernel (GPU, SM90): (N, D) -> (N, D)
    fp32, the semantics of ``moe_gluon_w4a8.run_experts_w4a8`` (and so of
    ``moe_experts.run_experts``). Launches: Q8_32 values of x, align, gather, gated GEMM (two
    launches: g, u in x.dtype), ``moe_swiglu.swiglu_fake_q8_slots`` (h's Q8_32 values in the
    down GEMM's token order: the SwiGLU and the gather in one), down GEMM, combine
    (``combine=False``: the per-pair outputs). ``rep`` (None: ``program_shape``'s choice by
    pairs per expert): 2 runs one warpgroup of two A fragments per program; ``KERNEL`` picks
    the base or the producer-warp kernel; the bits depend on neither. ``x_rounded``: x holds
    its Q8_32 values already (bf16): no rounding launch."""
    from deepinfer.kernels.triton import moe_align, moe_swiglu, quant_act
    from deepinfer.kernels.triton.moe_experts import _weight_args, combine_pairs

    num_tokens, topk = expert_ids.shape
    num_pairs = num_tokens * topk
    (d1, s1, _, _), (d3, s3, _, _), (d2, s2, _, _) = (_weight_args(w) for w in (w1, w3, w2))
    inter, dim = d1.shape[1], d2.shape[1]
    block_m = block_m or BLOCK_M
    warpgroups = fitting_warpgroups([inter, dim], warpgroups)
    assert warpgroups, f"run_experts_w4a16_prefill: O {inter} / {dim} not multiples of {ROWS}"
    warpgroups, rep = program_shape([inter, dim], num_pairs / d1.shape[0], warpgroups, rep)
    one_mul = all(getattr(w, "scale_max", None) is not None and w.scale_max <= 128
                  for w in (w1, w3, w2))
    xq = x.contiguous() if x_rounded else quant_act.fake_quant_fp8_block32(x.contiguous())
    xq = xq.to(torch.bfloat16)
    pairs, blocks = moe_align.align_pairs(expert_ids, d1.shape[0], block_m)

    assert KERNEL in ("base", "ws", "auto"), f"moe_gluon_w4a16_prefill.KERNEL {KERNEL!r}"
    ws_gemm = None
    if KERNEL == "ws" or (KERNEL == "auto" and rep == 2):  # lazy: that module imports this one
        from deepinfer.kernels.triton.moe_gluon_w4a16_prefill_ws import w4a16_prefill_ws_gemm
        ws_gemm = w4a16_prefill_ws_gemm

    def gemm(tokens, d, s, out):
        if ws_gemm is not None:
            ws_gemm(tokens, d, s, pairs, blocks, num_pairs, out, block_m, one_mul, warpgroups,
                    parts, rep, maxnreg=MAXNREG)
        else:
            w4a16_prefill_gemm(tokens, d, s, pairs, blocks, num_pairs, out, block_m, stages,
                               one_mul, warpgroups, parts, rep=rep, maxnreg=MAXNREG)

    xg = gather_tokens(xq, pairs, num_pairs, topk)
    if ws_gemm is not None and FUSED_SWIGLU and warpgroups == 1 and rep == 2 \
            and x.dtype == torch.bfloat16:
        # one launch: the gate and up projections of each 64 features in one program, whose
        # epilogue writes h's Q8_32 values in the down GEMM's token order (the same bits)
        from deepinfer.kernels.triton.moe_gluon_w4a16_prefill_ws import w4a16_gated_ws_gemm

        hg = torch.empty((pairs.numel(), inter), dtype=torch.bfloat16, device=x.device)
        w4a16_gated_ws_gemm(xg, d1, s1, d3, s3, pairs, blocks, num_pairs, weights.reshape(-1),
                            limit, hg, block_m, one_mul, parts, maxnreg=MAXNREG)
    else:
        g = torch.empty((num_pairs, inter), dtype=x.dtype, device=x.device)
        u = torch.empty_like(g)
        gemm(xg, d1, s1, g)
        gemm(xg, d3, s3, u)
        # h's Q8_32 values straight into the down GEMM's token order (one launch: the SwiGLU
        # and the gather of its output, the same bits)
        hg = moe_swiglu.swiglu_fake_q8_slots(g, u, weights.reshape(-1), limit, x.dtype, pairs,
                                             num_pairs)
    y = torch.empty((num_pairs, dim), dtype=x.dtype, device=x.device)
    gemm(hg, d2, s2, y)
    if not combine:  # the per-pair outputs (N * topk, D) in x.dtype, as run_experts gives
        return y
    return combine_pairs(y, expert_ids if combine_ids is None else combine_ids)


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/test_moe_w4a16_prefill.py; also
    bench/gluon_sass.py): 64 / 128 pairs per program, both decodes, 1 / 2 warpgroups (a weight
    box within one step tile of the order), parts 1 / 2 / 4 (and 8 at REP 2, BM 128), REP 2 on
    one warpgroup at BM 64 and 128; and the token gather."""
    cases = []
    for bm, stages, one_mul, wg, parts, rep in (
            (64, 4, True, 1, 1, 1), (64, 4, False, 1, 2, 1), (128, 3, True, 1, 2, 1),
            (128, 2, True, 2, 2, 1), (128, 2, True, 2, 4, 1), (64, 4, False, 1, 4, 1),
            (128, 2, True, 1, 4, 2), (64, 4, True, 1, 4, 2), (128, 2, True, 1, 8, 2)):
        cases.append({"id": f"w4a16_prefill_bm{bm}_s{stages}_{'one' if one_mul else 'two'}"
                            f"_wg{wg}_parts{parts}" + (f"_rep{rep}" if rep > 1 else ""),
                      "gluon": True, "module": __name__, "kernel": "_w4a16_prefill_kernel",
                      "signature": {"x_desc": f"tma:bf16:128:{bm}x64",
                                    "xh_desc": f"tma:bf16:128:{bm // 2}x64",
                                    "xq_desc": f"tma:bf16:128:{bm // 4}x64",
                                    "xe_desc": f"tma:bf16:128:{eighth_rows(bm)}x64",
                                    "w_desc": f"tma:u8:0:{64 * wg * rep}x64",
                                    "s_ptr": "*u8",
                                    "pairs_ptr": "*i32", "block_expert_ptr": "*i32",
                                    "out_ptr": "*bf16", "num_pairs": "i32", "O": "i32",
                                    "K": "i32", "stride_se": "i32", "stride_sn4": "i32",
                                    "stride_om": "i32"},
                      "constexprs": {"STAGES": stages, "WSTAGES": WEIGHT_STAGES, "BM": bm,
                                     "ONE_MUL": one_mul,
                                     "PARTS": parts,
                                     "PG": {"call": "group_layout", "args": [wg, rep]},
                                     "REP": rep,
                                     "num_warps": 4 * wg},
                      "num_warps": 4 * wg, "num_stages": 1, "no_spill": True,
                      "expect_wgmma": True, "divisible": ["K", "O"]})
    cases.append({"id": "w4a16_gather_tokens", "module": __name__,
                  "kernel": "_gather_tokens_kernel",
                  "signature": {"x_ptr": "*bf16", "pairs_ptr": "*i32", "out_ptr": "*bf16",
                                "num_pairs": "i32", "num_slots": "i32", "K": "i32",
                                "row_div": "i32", "stride_x": "i32", "stride_o": "i32"},
                  "constexprs": {"SLOTS": GATHER_SLOTS, "BLOCK_K": GATHER_BLOCK_K},
                  "num_warps": 4, "num_stages": 1, "no_spill": True,
                  "divisible": ["K", "stride_x", "stride_o"]})
    return cases
