"""Decode expert GEMM with FP8 tensor cores over MXFP4 weights, in Gluon (SM90 only). The
engine runs it when the expert stacks are in its layout (the SM90 default,
``runtime/kernel_backends.expert_byte_order``; ``moe_experts.run_experts`` hands decode-sized
calls to ``run_experts_w4a8`` below; prefill sizes go to ``moe_gluon_w4a16_prefill``).

    out[p, o] = sum over K of W_e[o, k] * x[row(p), k]        (W1 and W3: the gated GEMM)

Why: the bf16 kernels (``moe_experts``; a Gluon probe, since removed) spend ~3-4 instructions
per weight on the MXFP4 -> scaled bf16 unpack, and stall at ~0.6 of HBM. Here a weight costs ~2.4
instructions in the gated K loop (sm_90 SASS), and the GEMMs reach 0.69-0.72 of HBM:

  * x is the Q8_32 activation as it is (e4m3 codes + ue8m0 per 32 K, ``quant_act.quant_q8_32``),
    the weights become e4m3 codes by bit moves only: e2m1 (s e1 e0 m) -> e4m3 bits
    s 0 0 e1 e0 m 0 0 = value * 2^-6, exact (e2m1's subnormal 0.5 lands on e4m3's subnormal).
  * One FP8 wgmma (m64 n8 k32) per 32-K group, into its own accumulator, then the promotion
    acc += acc_g * 2^(ew + ex - 121) in fp32 (weight scale ew per row, activation scale ex
    per token; the 2^6 of the codes is in the -121). The in-group sums run in the tensor core's
    FP8 accumulator (~14 bits on Hopper), not the exact-product fp32 sums of the W4A16 path:
    2.3e-5 relative against the fp32 reference in round 39.
  * Kernel order (``to_kernel_order`` = ``kernels/mxfp4_w4a8_order.to_w4a8_order``, once at
    load; ``to_kernel_order_gpu``: one launch): one 32-bit word per (row, 32-K group,
    quad lane q) holds the 8 nibbles a thread needs for its wgmma A fragment of that row:
    K = 32 G + 4 q + b (b < 4: register "lo") and 32 G + 16 + 4 q + b ("hi"), placed so that
        lo = w & 0x9C9C9C9C,   hi = (rotl(w, 2) & 0x88888888) | (rotl(w, 4) & 0x14141414)
    (5 instructions for 8 weights). A 128-K step of a row is 16 words, quad lane q's four
    (groups 0..3) contiguous: one 16-byte chunk. The rows' steps lie in step tiles of 128
    rows (a tile's step: one contiguous 8 KB), so a program's box is one sequential run.
  * Weight tiles [64 rows, 64 bytes] stream through a TMA ring (``STAGES``); the register
    layout of the shared-memory load, the unpack's outputs and the wgmma A operand line up
    (no shuffles: checked in the sm_90 PTX, tests/kernels/triton/test_moe_gluon.py).
  * Tokens: BM = 8 (or 16) pairs of one expert per program (``moe_align.align_pairs``), their
    codes [BM, 128] per step in a 2-deep shared ring as the wgmma B operand.
  * Both GEMMs run one loop of two 64-row weight operands a step: W1 and W3 for the gated one,
    the two halves of a 128-row step tile of W2 for the down one (``PAIRED``).

Shapes: x codes (rows, K) uint8 + scales (rows, K/32) uint8; w (E, O, K/2) uint8 in kernel
order; ws (E, O, K/32) uint8; sorted_pairs (num_blocks * 8,) int32 (padding = num_pairs);
block_expert (num_blocks,) int32 (-1 idle); out (num_pairs, O) fp32. Reference:
``moe_gluon.reference_grouped`` on the dequantized activation.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from deepinfer.kernels.mxfp4_w4a8_order import (
    TILE_ROWS,
    unpack_twin,  # noqa: F401  (re-exported)
)
from deepinfer.kernels.mxfp4_w4a8_order import (  # noqa: F401  (re-exported)
    from_w4a8_order as from_kernel_order,
)
from deepinfer.kernels.mxfp4_w4a8_order import (  # noqa: F401  (re-exported)
    to_w4a8_order as to_kernel_order,
)
from deepinfer.kernels.triton.host_cache import weight_descriptor
from deepinfer.kernels.triton.launch_math import cdiv
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON

ROWS = 64  # weight rows per program: one warpgroup, the wgmma M side
BLOCK_K = 128  # K per pipeline step: 4 groups of 32
BLOCK_M = 8  # pairs per program: the wgmma N side
# A K step's next codes and scale words are fetched one step ahead: the scale words by plain
# loads into registers (round 56a, one machine, 4 stages: the whole run_experts_w4a8 1.504 ->
# 1.478 ms at 64 tokens, 2.586 -> 2.383 at 256 against loading them in their own step), the
# activation codes global -> shared by cp.async into the other slot of a 2-deep ring (round
# 113: no register copy, 228 -> 216 / 359 -> 349 instructions a K step down / gated in the
# sm_90 SASS, decode 64 x 32K 13.49 -> 13.25 ms; the down GEMM is issue-bound, Nsight Compute
# in round 110a: 0.79 instructions per cycle per scheduler, "not selected" the top stall).
# The down GEMM (one weight) runs on the gated loop, a program's 128 rows of a step tile as
# its two operands (``PAIRED``): one activation tile, one barrier / TMA / scale-load round and
# one token-scale extraction per 8 KB of weights instead of per 4 KB (the down loop: 216
# instructions a step per 4 KB, the gated one 349 per 8 KB). Round 116a, one machine,
# interleaved: the down GEMM 0.498 -> 0.473 ms at 64 tokens, 0.789 -> 0.752 at 256 (correct:
# rel. L2 2.3e-05 both); decode 64 x 32K 13.23 -> 13.03 ms, 256 x 32K 23.23 -> 22.77. The
# switches of these three (DECODE_PREFETCH, DECODE_XCP, DECODE_PAIRED) were removed with their
# off paths, each measured slower (code at commit bf55292).
# a step's refills (the weights' TMA, the next codes' cp.async) are issued right after its CTA
# barrier, before its wgmmas. Issued after them (session 37, REFILL_LATE: ~30 instructions and
# the refill's barriers under the wgmmas in the sm_90 SASS; code at 58e0547), H200 round 180:
# the gated GEMM 0.85 -> 0.89 ms at 64 tokens, 1.32 -> 1.40 at 256, the down GEMM +6-8 %, decode
# 64 / 256 x 4K 12.01 / 20.87 -> 12.65 / 21.94 ms, the same bits: the loads' lead over their
# use counts for more here than the instructions the wgmmas hide. Ring depth (round 181, the
# same launches): 3 / 4 / 6 stages 0.86 / 0.84 / 1.05 ms gated at 64 tokens — 4 stays

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    from deepinfer.kernels.triton.moe_gluon import (
        cta_barrier,
        issue_step,
        start_ring,
        store_tiles,
        tile_row0,
    )

    # 16 bytes = words (row g, group 2j), (row g + 8, 2j), (g, 2j + 1), (g + 8, 2j + 1) ->
    # P = the A fragment of group 2j (lo g, lo g+8, hi g, hi g+8), Q = that of group 2j + 1
    _UNPACK_ASM = gl.constexpr("""{
.reg .b32 r, t;
and.b32 $0, $8, 0x9C9C9C9C;
and.b32 $1, $9, 0x9C9C9C9C;
shf.l.wrap.b32 r, $8, $8, 2; shf.l.wrap.b32 t, $8, $8, 4;
and.b32 r, r, 0x88888888; and.b32 t, t, 0x14141414; or.b32 $2, r, t;
shf.l.wrap.b32 r, $9, $9, 2; shf.l.wrap.b32 t, $9, $9, 4;
and.b32 r, r, 0x88888888; and.b32 t, t, 0x14141414; or.b32 $3, r, t;
and.b32 $4, $10, 0x9C9C9C9C;
and.b32 $5, $11, 0x9C9C9C9C;
shf.l.wrap.b32 r, $10, $10, 2; shf.l.wrap.b32 t, $10, $10, 4;
and.b32 r, r, 0x88888888; and.b32 t, t, 0x14141414; or.b32 $6, r, t;
shf.l.wrap.b32 r, $11, $11, 2; shf.l.wrap.b32 t, $11, $11, 4;
and.b32 r, r, 0x88888888; and.b32 t, t, 0x14141414; or.b32 $7, r, t;
}""")

    @gluon.jit
    def _group_operands(p, LA: gl.constexpr):
        """Shared-memory bytes p [R, 64] of one step (layout L64; R = 64 per warpgroup) ->
        the e4m3 A operands [R, 32] of its 4 groups (layout LA)."""
        pq, qq = gl.inline_asm_elementwise(
            _UNPACK_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r", [p], dtype=(gl.uint8, gl.uint8),
            is_pure=True, pack=16)
        # columns 16 q + 8 j + 4 t + b (t: lo / hi) -> (row, t, q, b) per group pair j
        R: gl.constexpr = p.shape[0]
        pq = gl.permute(gl.reshape(pq, [R, 4, 2, 2, 4]), [0, 3, 1, 4, 2])
        qq = gl.permute(gl.reshape(qq, [R, 4, 2, 2, 4]), [0, 3, 1, 4, 2])
        g0, g2 = gl.split(pq)
        g1, g3 = gl.split(qq)
        return (_operand(g0, LA), _operand(g1, LA), _operand(g2, LA), _operand(g3, LA))

    @gluon.jit
    def _operand(g, LA: gl.constexpr):
        return gl.convert_layout(gl.reshape(g, [g.shape[0], 32]), LA).to(gl.float8e4nv,
                                                                         bitcast=True)

    @gluon.jit
    def promote_words(acc, acc_g, ew, ex, g: gl.constexpr):
        """acc + acc_g * 2^(ew_g + ex_g - 121) for group g of a K step: ew [64] (rows, the
        accumulator's row layout) and ex [BM] (tokens, its column layout) are int32 words of
        4 ue8m0 bytes, one per group (the 2^6 of the unpacked codes is in the -121)."""
        ew_b = (((ew >> (8 * g)) & 0xFF) - 121) << 23
        ex_b = ((ex >> (8 * g)) & 0xFF) << 23
        return acc + acc_g * (ew_b[:, None] + ex_b[None, :]).to(gl.float32, bitcast=True)

    @gluon.jit
    def _mma_groups(a0, a1, a2, a3, x_s, z):
        """The 4 groups' wgmmas [64, 32] x [32, BM], each into a fresh accumulator, async."""
        c0 = warpgroup_mma(a0, x_s.slice(0, 32, dim=1).permute((1, 0)), z, use_acc=False,
                           is_async=True)
        c1 = warpgroup_mma(a1, x_s.slice(32, 32, dim=1).permute((1, 0)), z, use_acc=False,
                           is_async=True)
        c2 = warpgroup_mma(a2, x_s.slice(64, 32, dim=1).permute((1, 0)), z, use_acc=False,
                           is_async=True)
        c3 = warpgroup_mma(a3, x_s.slice(96, 32, dim=1).permute((1, 0)), z, use_acc=False,
                           is_async=True)
        return c0, c1, c2, c3

    @gluon.jit
    def _scale_loads(xs_words, s1_words, s3_words, step):
        """K step ``step``'s token scale words [BM] and weight scale words [64] of the two
        operands (w1 and w3, or a paired launch's two row halves)."""
        ex = gl.load(xs_words + step)
        ew = gl.load(s1_words + step)
        fw = gl.load(s3_words + step)
        return ex, ew, fw

    @gluon.jit
    def _w4a8_decode_kernel(xc_ptr, xs_ptr, w1_desc, s1_ptr, w3_desc, s3_ptr, pairs_ptr,
                            block_expert_ptr, out1_ptr, out3_ptr, num_pairs, O, K, x_row_div,
                            stride_xc, stride_xs4, stride_se, stride_sn4, stride_om,
                            STAGES: gl.constexpr, BM: gl.constexpr, TILE: gl.constexpr,
                            PAIRED: gl.constexpr, num_warps: gl.constexpr):
        """The gated loop: two weight operands of 64 rows per K step on one activation tile.
        Not PAIRED (the gated GEMM): rows [64 t, 64 t + 64) of w1 and of w3 into out1 / out3.
        PAIRED (the down GEMM, one weight): rows [128 t, 128 t + 64) as "w1" and the next 64
        as "w3" (one step tile, ROW3 = 64), both into out1's columns."""
        gl.static_assert(BM == 8 or BM == 16, "BM: 8 or 16 pairs per program")
        gl.static_assert(not PAIRED or TILE == 128, "PAIRED: two halves of a 128-row step tile")
        ROW3: gl.constexpr = 64 if PAIRED else 0
        BK: gl.constexpr = 128
        # shared tile [64 rows, 64 bytes] -> registers: bytes b (2 bits), row + 8 (m), word
        # (2 bits: group) of quad lane q's 16-byte chunk; lanes q and g; warps w: row 16 w + 8 m
        # + g, the wgmma A fragment rows
        L64: gl.constexpr = gl.DistributedLinearLayout(
            reg_bases=[[0, 1], [0, 2], [8, 0], [0, 4], [0, 8]],
            lane_bases=[[0, 16], [0, 32], [1, 0], [2, 0], [4, 0]],
            warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[64, 64])
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BM, 32])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4)
        ROW_L: gl.constexpr = gl.SliceLayout(1, MMA)
        COL_L: gl.constexpr = gl.SliceLayout(0, MMA)
        LX: gl.constexpr = gl.BlockedLayout([1, BM], [BM // 4, 128 // BM], [4, 1],
                                            [1, 0])  # codes [BM, 128]: BM bytes per thread
        SX: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8,
                                                 rank=2)
        block = gl.program_id(0)
        tile = gl.program_id(1)
        expert = gl.load(block_expert_ptr + block)
        if expert >= 0:
            num_steps = K // BK
            tile64 = tile * 2 if PAIRED else tile  # the program's first 64-row tile
            row0 = tile_row0(expert * O + tile64 * 64, num_steps, TILE)  # step tiles
            w1_s, w3_s, bars = start_ring(w1_desc, w3_desc, row0, num_steps, STAGES, BK, TILE,
                                          ROW3)

            # scales as int32 words (a K step's 4 groups): a thread's rows and tokens in the
            # accumulator's row / column layouts (no layout conversion in the promotion)
            r_w = tile64 * 64 + gl.arange(0, 64, layout=ROW_L)
            sw_off = r_w.to(gl.int64) * (stride_sn4 * 4)
            s1_words = (s1_ptr + expert.to(gl.int64) * stride_se + sw_off).to(
                gl.pointer_type(gl.int32), bitcast=True)
            s3_words = (s3_ptr + expert.to(gl.int64) * stride_se + sw_off
                        + ROW3 * stride_sn4 * 4).to(gl.pointer_type(gl.int32), bitcast=True)

            t_x = gl.arange(0, BM, layout=gl.SliceLayout(1, LX))
            pairs_x = gl.load(pairs_ptr + block * BM + t_x)
            rows_x = (gl.where(pairs_x < num_pairs, pairs_x, 0) // x_row_div).to(gl.int64)
            xc_ptrs = xc_ptr + (rows_x * stride_xc)[:, None] + gl.arange(
                0, BK, layout=gl.SliceLayout(0, LX))[None, :]
            pairs_s = gl.load(pairs_ptr + block * BM + gl.arange(0, BM, layout=COL_L))
            rows_s = (gl.where(pairs_s < num_pairs, pairs_s, 0) // x_row_div).to(gl.int64)
            xs_words = (xs_ptr + rows_s * (stride_xs4 * 4)).to(gl.pointer_type(gl.int32),
                                                               bitcast=True)

            x_smem = gl.allocate_shared_memory(gl.float8e4nv, [2, BM, BK], SX)
            acc1 = gl.zeros([64, BM], gl.float32, MMA)
            acc3 = gl.zeros([64, BM], gl.float32, MMA)
            z = gl.zeros([64, BM], gl.float32, MMA)

            # one step ahead: the scale words by plain loads (codes' token scales from L2, weight
            # scales from HBM; round 53: "long scoreboard" was the largest stall at 256 tokens
            # when a step loaded its own), the activation codes global -> shared by cp.async
            # into the other slot (no register copy: carried through the loop as uint8
            # registers they cost ~22 byte moves a step)
            x8_ptrs = xc_ptrs.to(gl.pointer_type(gl.float8e4nv), bitcast=True)
            async_copy.async_copy_global_to_shared(x_smem.index(0), x8_ptrs)
            async_copy.commit_group()
            ex, ew, fw = _scale_loads(xs_words, s1_words, s3_words, 0)
            for i in range(num_steps):
                nxt = gl.minimum(i + 1, num_steps - 1)  # the last step reloads its own
                ex_next, ew_next, fw_next = _scale_loads(xs_words, s1_words, s3_words, nxt)
                async_copy.wait_group(0)  # this thread's codes of step i landed
                fence_async_shared()
                cta_barrier()  # everyone's landed; every warp is past step i - 1's wgmmas
                x8 = x_smem.index(i % 2)
                # after the barrier: every warp is past step i - 1's reads of the stage this
                # refills (each warp's wgmma covers only its own 16 rows, so a warp's wait
                # does not imply the others have read their weights)
                issue_step(w1_desc, w3_desc, w1_s, w3_s, bars, row0, i + STAGES - 1,
                           num_steps, STAGES, BK, TILE, ROW3)
                # the next step's codes into the other slot (read at step i - 1)
                async_copy.async_copy_global_to_shared(x_smem.index((i + 1) % 2),
                                                       x8_ptrs + nxt * BK)
                async_copy.commit_group()
                stage = i % STAGES
                mbarrier.wait(bars.index(stage), (i // STAGES) & 1)
                a0, a1, a2, a3 = _group_operands(w1_s.index(stage).load(L64), LA)
                c0, c1, c2, c3 = _mma_groups(a0, a1, a2, a3, x8, z)
                b0, b1, b2, b3 = _group_operands(w3_s.index(stage).load(L64), LA)
                d0, d1, d2, d3 = _mma_groups(b0, b1, b2, b3, x8, z)
                c0, c1, c2, c3, d0, d1, d2, d3 = warpgroup_mma_wait(
                    num_outstanding=0, deps=(c0, c1, c2, c3, d0, d1, d2, d3))
                acc3 = promote_words(acc3, d0, fw, ex, 0)
                acc3 = promote_words(acc3, d1, fw, ex, 1)
                acc3 = promote_words(acc3, d2, fw, ex, 2)
                acc3 = promote_words(acc3, d3, fw, ex, 3)
                acc1 = promote_words(acc1, c0, ew, ex, 0)
                acc1 = promote_words(acc1, c1, ew, ex, 1)
                acc1 = promote_words(acc1, c2, ew, ex, 2)
                acc1 = promote_words(acc1, c3, ew, ex, 3)
                ex, ew, fw = ex_next, ew_next, fw_next
            async_copy.wait_group(0)  # the last step's extra copy
            for b in gl.static_range(STAGES):
                mbarrier.invalidate(bars.index(b))

            store_tiles(acc1, acc3, out1_ptr, out3_ptr + ROW3, pairs_ptr, block, tile64,
                        num_pairs, stride_om, BM, MMA)


def tiled_descriptor(packed: torch.Tensor, rows: int):
    """TMA descriptor of (E, O, K/2) W4A8-order bytes (in step tiles) as [E * O * K/128, 64]:
    boxes [rows, 64 bytes] (rows | ``TILE_ROWS``: one contiguous run per box), unswizzled
    (shared by the three Gluon kernels of the order)."""
    assert TILE_ROWS % rows == 0, (rows, TILE_ROWS)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    flat = packed.reshape(-1, BLOCK_K // 2)
    return weight_descriptor(packed, flat, [rows, BLOCK_K // 2], _weight_layout(),
                             TensorDescriptor)


@functools.cache
def _weight_layout():
    """The weight boxes' shared layout: bytes, unswizzled."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)


@triton.jit
def _place_lo(n, b: tl.constexpr):
    """e2m1 nibble n (int32) -> its bits in a kernel-order word as lo byte b."""
    return ((((n >> 3) & 1) << (8 * b + 7)) | (((n >> 2) & 1) << (8 * b + 4))
            | (((n >> 1) & 1) << (8 * b + 3)) | ((n & 1) << (8 * b + 2)))


@triton.jit
def _place_hi(n, b: tl.constexpr):
    """e2m1 nibble n (int32) -> its bits in a kernel-order word as hi byte b."""
    return ((((n >> 3) & 1) << (8 * b + 5)) | (((n >> 2) & 1) << (8 * b))
            | (((n >> 1) & 1) << (8 * b + 1)) | ((n & 1) << (8 * ((b + 3) % 4) + 6)))


@triton.jit
def _kernel_order_kernel(src_ptr, dst_ptr, num_words, words_per_row,
                         BLOCK: tl.constexpr, TILE: tl.constexpr):
    """dst word o (step tile o // (16 TILE): rows of tile t = that // steps, step s = that %
    steps; row t TILE + (o // 16) % TILE, index i = 16 s + o % 16: quad lane (i % 16) // 4,
    group i % 4) from the 4 checkpoint-order bytes holding its nibbles."""
    o = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = o < num_words
    steps = words_per_row // 16
    tile_step = o // (16 * TILE)
    row = (tile_step // steps) * TILE + (o // 16) % TILE
    i = (tile_step % steps) * 16 + o % 16
    base = row * (words_per_row * 4) + (i // 16) * 64 + (i % 4) * 16 + ((i % 16) // 4) * 2
    b0 = tl.load(src_ptr + base, mask=ok, other=0).to(tl.int32) & 0xFF
    b1 = tl.load(src_ptr + base + 1, mask=ok, other=0).to(tl.int32) & 0xFF
    b2 = tl.load(src_ptr + base + 8, mask=ok, other=0).to(tl.int32) & 0xFF
    b3 = tl.load(src_ptr + base + 9, mask=ok, other=0).to(tl.int32) & 0xFF
    w = (_place_lo(b0 & 0xF, 0) | _place_lo(b0 >> 4, 1) | _place_lo(b1 & 0xF, 2)
         | _place_lo(b1 >> 4, 3) | _place_hi(b2 & 0xF, 0) | _place_hi(b2 >> 4, 1)
         | _place_hi(b3 & 0xF, 2) | _place_hi(b3 >> 4, 3))
    tl.store(dst_ptr + o, w, mask=ok)


CONVERT_BLOCK = 1024  # words per program


def to_kernel_order_gpu(packed: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``to_kernel_order`` in one Triton launch (any device Triton runs on; the interpreter on
    CPU): packed (..., O, K/2) uint8/int8 in checkpoint order -> out (new, or given:
    contiguous, same shape, not ``packed`` itself); O a multiple of ``TILE_ROWS``."""
    half = packed.shape[-1]
    assert half % (BLOCK_K // 2) == 0, (packed.shape, BLOCK_K)
    assert packed.dim() >= 2 and packed.shape[-2] % TILE_ROWS == 0, (packed.shape, TILE_ROWS)
    src = packed.contiguous().view(torch.uint8)
    dst = torch.empty(packed.shape, dtype=torch.uint8, device=packed.device) if out is None \
        else out.view(torch.uint8)
    assert dst.data_ptr() != src.data_ptr(), "to_kernel_order_gpu: not in place"
    words = dst.view(torch.int32)
    num_words = words.numel()
    if num_words:
        _kernel_order_kernel[(cdiv(num_words, CONVERT_BLOCK),)](
            src, words, num_words, half // 4, BLOCK=CONVERT_BLOCK, TILE=TILE_ROWS, num_warps=4)
    return dst.view(packed.dtype)


def register_cap(paired: bool, block_m: int) -> int | None:
    """The launch's register cap (maxnreg) from the sm_90 SASS (tests/kernels/triton/
    test_moe_gluon.py checks there are no spills): at 8 pairs per program 128 for both launches
    (the gated one and the paired down one run the same loop; its step-ahead loads cost ~27
    registers, 143 uncapped), which keeps 4 programs per SM. 16 pairs: uncapped.
    bench/kernel_overrides.py --w4a8-decode-variant GATED_CAP:DOWN_CAP sets others."""
    return 128 if block_m == 8 else None


def w4a8_decode_gemm(x_codes: torch.Tensor, x_scales: torch.Tensor, w1: torch.Tensor,
                     s1: torch.Tensor, w3: torch.Tensor | None, s3: torch.Tensor | None,
                     sorted_pairs: torch.Tensor, block_expert: torch.Tensor, num_pairs: int,
                     x_row_div: int, stages: int = 4, block_m: int = BLOCK_M,
                     out_dtype: torch.dtype = torch.float32
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """out1 (num_pairs, O) out_dtype = Q8_32 x[pair // x_row_div] @ W1[expert]^T (and out3);
    the fp32 sums are rounded once to out_dtype when stored. Rows of pairs that no block holds
    (ids outside [0, E)) are not written. Without w3 (the down GEMM) the launch is paired: a
    program's two operands are the two 64-row halves of one 128-row step tile of w1.

    x_codes (rows, K) uint8 e4m3 + x_scales (rows, K/32) uint8 (``quant_act.quant_q8_32``);
    w1/w3 (E, O, K/2) in ``to_kernel_order``, s1/s3 (E, O, K/32) uint8; pairs grouped by
    ``moe_align.align_pairs(ids, E, block_m)`` (8 or 16)."""
    assert HAS_GLUON, "w4a8_decode_gemm needs triton's Gluon"
    num_experts, out_features, half = w1.shape
    k = half * 2
    assert k % BLOCK_K == 0 and out_features % ROWS == 0 and x_codes.shape[1] == k
    assert s1.stride(1) % 4 == 0 and x_scales.stride(0) % 4 == 0  # 4-byte scale loads
    gated = w3 is not None
    out1 = torch.empty((num_pairs, out_features), dtype=out_dtype, device=x_codes.device)
    out3 = torch.empty_like(out1) if gated else out1
    assert out_features % TILE_ROWS == 0, (w1.shape, TILE_ROWS)
    paired = not gated  # the down GEMM on the gated loop (two halves)
    d1 = tiled_descriptor(w1, ROWS)
    d3 = tiled_descriptor(w3, ROWS) if gated else d1
    grid = (block_expert.numel(), out_features // (2 * ROWS if paired else ROWS))
    cap = register_cap(paired, block_m)
    _w4a8_decode_kernel[grid](
        x_codes, x_scales, d1, s1, d3, s3 if gated else s1, sorted_pairs, block_expert, out1,
        out3, num_pairs, out_features, k, x_row_div, x_codes.stride(0), x_scales.stride(0) // 4,
        s1.stride(0), s1.stride(1) // 4, out1.stride(0), STAGES=stages, BM=block_m,
        TILE=TILE_ROWS, PAIRED=paired, num_warps=4, **({"maxnreg": cap} if cap else {}))
    return out1, (out3 if gated else None)


def run_experts_w4a8(x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor,
                     w1, w3, w2, limit: float, combine_ids: torch.Tensor | None = None,
                     stages: int = 4, combine: bool = True) -> torch.Tensor:
    """The routed experts at decode sizes with this kernel (GPU, SM90): (N, D) -> (N, D) fp32,
    the same semantics as ``moe_experts.run_experts`` (W4A8 accumulation inside each 32-K
    group). w1, w3 (E, I, D/2) and w2 (E, D, I/2): ``ExpertWeights`` whose ``data`` is in
    ``to_kernel_order``, scale bytes <= 128. Launches: Q8_32 of x, align (8 pairs per block),
    gated GEMM (g, u in x.dtype), ``moe_swiglu.swiglu_q8``, down GEMM (y in x.dtype), combine
    (``combine=False``: y itself, the per-pair outputs (N * topk, D) in x.dtype — what the
    1-expert ``expert_ffn`` calls of the EP path take). The runtime's ``Mxfp4ExpertWeights``
    (``w4a8_order``) work the same way.
    """
    from deepinfer.kernels.triton import moe_align, moe_swiglu, quant_act
    from deepinfer.kernels.triton.moe_experts import _weight_args, combine_pairs

    num_tokens, topk = expert_ids.shape
    num_pairs = num_tokens * topk
    (d1, s1, _, _), (d3, s3, _, _), (d2, s2, _, _) = (_weight_args(w) for w in (w1, w3, w2))
    codes, scales = quant_act.quant_q8_32(x.contiguous())
    pairs, blocks = moe_align.align_pairs(expert_ids, d1.shape[0], BLOCK_M)
    g, u = w4a8_decode_gemm(codes, scales, d1, s1, d3, s3, pairs, blocks, num_pairs, topk,
                            stages=stages, out_dtype=x.dtype)
    h_codes, h_scales = moe_swiglu.swiglu_q8(g, u, weights.reshape(-1), limit, x.dtype)
    y, _ = w4a8_decode_gemm(h_codes, h_scales, d2, s2, None, None, pairs, blocks, num_pairs, 1,
                            stages=stages, out_dtype=x.dtype)
    if not combine:  # the per-pair outputs (N * topk, D) in x.dtype, as run_experts gives
        return y
    return combine_pairs(y, expert_ids if combine_ids is None else combine_ids)
