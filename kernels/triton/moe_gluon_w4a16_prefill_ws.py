"""The prefill expert GEMM of ``moe_gluon_w4a16_prefill`` with its TMA issue moved to a producer
warp (Gluon, SM90 only): the same decode, the same wgmmas in the same order, the same bits.

    out[p, o] = sum over K of W_e[o, k] * x[p, k]      (p: the block's pairs, sorted by expert)

Why: in the shipped kernel's K loop (sm_90 SASS, session 27) a 128-K step's TMA issue — two
expects, three to five copies, the stage bookkeeping, ELECT / R2UR / VOTEU per copy — costs
~80 instructions per thread and Triton's barrier analysis puts a CTA barrier between each two
of those operations on the shared barrier array (7 BAR.SYNC and a MEMBAR.ALL.CTA a step): the
kernel is issue-bound (Nsight Compute: IPC 2.24, 1.3 of 3.96 warps eligible), so that work is
paid in time. Here:

  * a producer partition of one warp (``PRODUCER_REGS`` registers) fills a ring of ``stages``
    stages, each one weight tile [64 WG REP rows, 64 B] and the step's token boxes, under one
    "full" barrier per stage (one expect for all of the step's bytes); it waits for the
    stage's "empty" barrier before refilling it;
  * the default partition (the consumer warpgroups) runs the shipped loop — a step's weight
    words loaded from shared memory at the end of the step before, each 32-K group's bits
    extracted while the previous group's wgmmas run, scaled and issued after their wait — and
    frees a stage once its last wgmma is waited (its weight words are already in registers):
    one partition barrier and one arrive a step, no TMA work.

Ring stages are shared by the weights and the tokens (a stage frees when both are consumed).
Programs of 64 WG REP weight rows as the base kernel's, plus two warpgroups of two fragments
(256 rows: two weight boxes of the order's step tiles a step). SASS per step (REP 2, BM 128):
495-502 instructions and 3 partition barriers against the base loop's 555-571 and 7 CTA
barriers. Registers: ``launch_regs``.

H200 (bench/moe_gluon_prefill.py --w4a16-kernel base ws, rounds 156-157, docs/performance.md
session 28): 5-13 % faster per gated call and 2-8 % per down call at 4K tokens (REP 2, one
warpgroup), level at 1K / 2K, slower on two warpgroups of one fragment at 8K (the padded
producer warpgroup costs that one-program-per-SM shape its registers); 256-row programs slower
than 128 at 4K, level at 8K. The pipeline runs it for REP 2 programs
(``moe_gluon_w4a16_prefill.KERNEL`` "auto").

``GATED`` (``w4a16_gated_ws_gemm``, session 41): a REP 2 program's two fragments are the gate
and up projections of the same 64 features, and its store is the SwiGLU epilogue
(``moe_swiglu_epilogue``): h's Q8_32 values in the down GEMM's token order, bit for bit the
two GEMMs and ``swiglu_fake_q8_slots``; with the epilogue's first (lane) layout 4-10 % slower
a call (H100 rounds 206-207), with its octet layout (session 43) 2-6.5 % faster: on in the
pipeline (``moe_gluon_w4a16_prefill.FUSED_SWIGLU``).
Shapes, contract and reference: ``moe_gluon_w4a16_prefill.w4a16_prefill_gemm``.
"""

from __future__ import annotations

from typing import Any

import torch

from deepinfer.kernels.mxfp4_w4a8_order import TILE_ROWS
from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as base
from deepinfer.kernels.triton import moe_swiglu_epilogue as epilogue
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON
from deepinfer.kernels.triton.moe_gluon_w4a8 import tiled_descriptor

STAGES = 2  # ring depth (weights and tokens together; 40 KB a stage at BM 128, 128 rows)
PRODUCER_WARPS = 1  # warps of the producer partition
PRODUCER_REGS = 40  # registers per thread of the producer warp (setmaxnreg)
# a program's warps: the consumer warpgroups and the producer's warpgroup (Triton pads a worker
# partition to whole warpgroups: one warp works, three wait at 24 registers)
REGISTER_FILE = 65536  # 32-bit registers per SM (H200)
# the down GEMM's (and any ungated launch's) output stores, read at the call: 1 converts the
# accumulator so each thread writes 8 consecutive features of one token (16-byte stores,
# ``_store_rows``; Triton converts through 2 KB of shared memory); 0 stores from the wgmma
# layout (2-byte values, 4 tokens' 16-byte runs a warp instruction). The same bits either way.
# H100 round 232 (bench/moe_gluon_prefill.py, 4K tokens, ws against wsr twice in alternation):
# the 4K pipeline 5.144 / 5.186 -> 5.071 / 5.134 ms (-1.2 %), the down GEMM 1.807 / 1.775 ->
# 1.686 / 1.773 ms — within the run's noise (the unchanged gated GEMM moved 3 %), never slower.
ROW_STORES = 1
# ... at these BM only: the GPU bit checks (tests/gpu/test_moe_gluon_gpu.py -k row_stores) pass
# at 128 (round 232) and 64 (round 233). H100 round 233, the lone 4K prompt (prefill_ab, 2
# rounds): 76.4 ms with the wgmma-layout stores, 74.2 with ROW_STORES (-2.9 %), the same tokens.
ROW_STORES_BLOCK_M = (64, 128)
group_layout = base.group_layout  # the consumer's weight words in registers (compile gate)

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

    from deepinfer.kernels.triton.moe_gluon import cta_barrier, tile_row0

    _TILE = gl.constexpr(TILE_ROWS)

    @gluon.jit
    def _producer(x_desc, x2_desc, w_desc, w3_desc, w_s, xa_s, xb_s, full, empty, row0, row1,
                  x_row0, num_steps, S: gl.constexpr, BO: gl.constexpr, BN: gl.constexpr,
                  BN2: gl.constexpr, GATED: gl.constexpr):
        """Step i's weight tile and token boxes into stage i % S once the consumer freed it
        (its (i // S)-th use; the first S uses wait for nothing). BO > one step tile (256
        rows): two weight boxes, the second from row1. GATED: rows [0, BO / 2) of the tile
        from w_desc (the gate projection) at row0, [BO / 2, BO) from w3_desc (the up
        projection's same rows) at row1."""
        for i in range(num_steps):
            st = i % S
            mbarrier.wait(empty.index(st), ((i // S) & 1) ^ 1, pred=i >= S)
            bar = full.index(st)
            mbarrier.expect(bar, BO * 64 + (BN + BN2) * 256)
            if GATED:
                tma.async_copy_global_to_shared(w_desc, [row0 + i * _TILE, 0], bar,
                                                w_s.index(st).slice(0, BO // 2, dim=0))
                tma.async_copy_global_to_shared(w3_desc, [row1 + i * _TILE, 0], bar,
                                                w_s.index(st).slice(BO // 2, BO // 2, dim=0))
            elif BO > _TILE:
                tma.async_copy_global_to_shared(w_desc, [row0 + i * _TILE, 0], bar,
                                                w_s.index(st).slice(0, _TILE, dim=0))
                tma.async_copy_global_to_shared(w_desc, [row1 + i * _TILE, 0], bar,
                                                w_s.index(st).slice(_TILE, _TILE, dim=0))
            else:
                tma.async_copy_global_to_shared(w_desc, [row0 + i * _TILE, 0], bar,
                                                w_s.index(st))
            tma.async_copy_global_to_shared(x_desc, [x_row0, i * 128], bar,
                                            xa_s.index(st).slice(0, BN, dim=0))
            tma.async_copy_global_to_shared(x_desc, [x_row0, i * 128 + 64], bar,
                                            xb_s.index(st).slice(0, BN, dim=0))
            if BN2 > 0:
                tma.async_copy_global_to_shared(x2_desc, [x_row0 + BN, i * 128], bar,
                                                xa_s.index(st).slice(BN, BN2, dim=0))
                tma.async_copy_global_to_shared(x2_desc, [x_row0 + BN, i * 128 + 64], bar,
                                                xb_s.index(st).slice(BN, BN2, dim=0))

    @gluon.jit
    def _consumer(w_s, xa_s, xb_s, full, empty, s_words, pairs_ptr, out_ptr, num_pairs, row_lo,
                  block, num_steps, stride_om, rw_ptr, limit, S: gl.constexpr, BM: gl.constexpr,
                  BN: gl.constexpr, BN2: gl.constexpr, ONE_MUL: gl.constexpr, PG: gl.constexpr,
                  REP: gl.constexpr, NW: gl.constexpr, GATED: gl.constexpr,
                  ROW_STORES: gl.constexpr):
        """``moe_gluon_w4a16_prefill._run_block``'s loop and store on a filled ring: step i's
        stage is freed after its last group's wait (step i + 1's words are loaded by then).
        GATED: the accumulators go to ``gated_tile`` (the ring's token buffer: every load
        has landed and been read) for the kernel's SwiGLU epilogue."""
        BO: gl.constexpr = 16 * NW * REP
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                       instr_shape=[16, BN, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        sw = gl.load(s_words)
        sw_next = gl.load(s_words + gl.minimum(num_steps - 1, 1))
        mbarrier.wait(full.index(0), 0)
        p0, p1, p2, p3 = base._step_words(w_s, 0, PG)
        a = base._scaled(base._extract(p0), sw, 0, ONE_MUL, LA)
        acc = gl.zeros([BO, BN], gl.float32, MMA)
        acc2 = acc  # unused unless BN2 > 0
        if BN2 > 0:
            MMA2: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                            warps_per_cta=[NW, 1],
                                                            instr_shape=[16, BN2, 16])
            acc2 = gl.zeros([BO, BN2], gl.float32, MMA2)
        for i in range(num_steps):
            st = i % S
            xa = xa_s.index(st)
            xb = xb_s.index(st)
            acc, acc2 = base._mma_group(a, xa, acc, acc2, 0, BN, BN2, 0)
            bits = base._extract(p1)
            acc, acc2 = base._wait(acc, acc2, BN2)
            a = base._scaled(bits, sw, 1, ONE_MUL, LA)
            acc, acc2 = base._mma_group(a, xa, acc, acc2, 0, BN, BN2, 32)
            bits = base._extract(p2)
            acc, acc2 = base._wait(acc, acc2, BN2)
            a = base._scaled(bits, sw, 2, ONE_MUL, LA)
            acc, acc2 = base._mma_group(a, xb, acc, acc2, 0, BN, BN2, 0)
            bits = base._extract(p3)
            acc, acc2 = base._wait(acc, acc2, BN2)
            a = base._scaled(bits, sw, 3, ONE_MUL, LA)
            acc, acc2 = base._mma_group(a, xb, acc, acc2, 0, BN, BN2, 32)
            # the next step's words (the last step reloads its own: a completed phase waits
            # for nothing), its first group extracted while this step's last group runs
            nxt = gl.minimum(i + 1, num_steps - 1)
            sw = sw_next
            sw_next = gl.load(s_words + gl.minimum(i + 2, num_steps - 1))
            mbarrier.wait(full.index(nxt % S), (nxt // S) & 1)
            p0, p1, p2, p3 = base._step_words(w_s, nxt % S, PG)
            bits = base._extract(p0)
            acc, acc2 = base._wait(acc, acc2, BN2)
            # every wgmma of step i is done and its words are in registers: stage st is free
            # (the arrive follows a partition barrier: all warps got here)
            mbarrier.arrive(empty.index(st), count=1)
            a = base._scaled(bits, sw, 0, ONE_MUL, LA)
        if GATED:  # g | u as bf16 into the block's tile (``gated_tile``); the kernel's
            # epilogue takes them from there (one copy of its code for every part fill)
            h_s = gated_tile(xa_s, BO, BM)
            h_s.slice(0, BN, dim=1).store(acc.to(gl.bfloat16))
            if BN2 > 0:
                h_s.slice(BN, BN2, dim=1).store(acc2.to(gl.bfloat16))
        elif ROW_STORES:
            _store_rows(acc, pairs_ptr, out_ptr, num_pairs, row_lo, block * BM, stride_om, NW)
            if BN2 > 0:
                _store_rows(acc2, pairs_ptr, out_ptr, num_pairs, row_lo, block * BM + BN,
                            stride_om, NW)
        else:
            base._store(acc, pairs_ptr, out_ptr, num_pairs, row_lo, block * BM, stride_om, MMA)
            if BN2 > 0:
                base._store(acc2, pairs_ptr, out_ptr, num_pairs, row_lo, block * BM + BN,
                            stride_om, MMA2)

    @gluon.jit
    def _store_rows(acc, pairs_ptr, out_ptr, num_pairs, row_lo, slot0, stride_om,
                    NW: gl.constexpr):
        """``base._store`` with each thread's 8 consecutive output features of one token: the
        accumulator [BO features, BN tokens] converted (through shared memory) so that a
        warp writes 16 tokens' 16-byte runs instead of 2-byte values from the wgmma layout
        (the pattern that cost ``linear_ss`` ~4 µs a tile)."""
        BO: gl.constexpr = acc.shape[0]
        LANES: gl.constexpr = 16 if BO >= 128 else BO // 8  # lanes along the features
        ROWS: gl.constexpr = gl.BlockedLayout([8, 1], [LANES, 32 // LANES], [1, NW], [0, 1])
        v = gl.convert_layout(acc.to(out_ptr.dtype.element_ty), ROWS)
        base._store(v, pairs_ptr, out_ptr, num_pairs, row_lo, slot0, stride_om, ROWS)

    @gluon.jit
    def gated_tile(xa_s, BO: gl.constexpr, BM: gl.constexpr):
        """A GATED program's [BO, BM] bf16 tile of g | u (``moe_swiglu_epilogue.H_SHARED``:
        a token's features contiguous), on the token ring's first buffer."""
        S: gl.constexpr = xa_s.shape[0]
        gl.static_assert(S * 64 >= BO, "g | u of the block fit the token ring")
        return xa_s._reinterpret(gl.bfloat16, [BO, BM], epilogue.H_SHARED)

    @gluon.jit
    def _ws_block(x_desc, x2_desc, w_desc, w3_desc, w_s, xa_s, xb_s, full, empty, s_words,
                  pairs_ptr, out_ptr, num_pairs, row0, row1, row_lo, block, num_steps,
                  stride_om, rw_ptr, limit, S: gl.constexpr, BM: gl.constexpr,
                  BN: gl.constexpr, BN2: gl.constexpr, ONE_MUL: gl.constexpr, PG: gl.constexpr,
                  REP: gl.constexpr, NW: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
                  PRODUCER_REGS: gl.constexpr, GATED: gl.constexpr, ROW_STORES: gl.constexpr):
        """One block's program at N = BN (+ BN2): consumer warpgroups and a producer warp."""
        BO: gl.constexpr = 16 * NW * REP
        gl.warp_specialize([
            (_consumer, (w_s, xa_s, xb_s, full, empty, s_words, pairs_ptr, out_ptr, num_pairs,
                         row_lo, block, num_steps, stride_om, rw_ptr, limit, S, BM, BN, BN2,
                         ONE_MUL, PG, REP, NW, GATED, ROW_STORES)),
            (_producer, (x_desc, x2_desc, w_desc, w3_desc, w_s, xa_s, xb_s, full, empty, row0,
                         row1, block * BM, num_steps, S, BO, BN, BN2, GATED)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])

    @gluon.jit
    def _ws_eighths(x_desc, xh_desc, xq_desc, xe_desc, w_desc, w3_desc, w_s, xa_s, xb_s, full,
                    empty, s_words, pairs_ptr, out_ptr, num_pairs, row0, row1, row_lo, block,
                    num_steps, stride_om, rw_ptr, limit, used, S: gl.constexpr,
                    BM: gl.constexpr, ONE_MUL: gl.constexpr, PG: gl.constexpr,
                    REP: gl.constexpr, NW: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
                    PRODUCER_REGS: gl.constexpr, GATED: gl.constexpr,
                    ROW_STORES: gl.constexpr):
        """``_ws_block`` at the N of ``used`` eighths of BM (``base.part_tiles``)."""
        descs = (x_desc, xh_desc, xq_desc, xe_desc)  # token boxes of BM >> i rows
        for u in gl.static_range(1, 8):
            if base.eighths_hit(used, u):
                _ws_block(descs[base._EIGHTHS_BOX[u - 1]], descs[base._EIGHTHS_BOX2[u - 1]],
                          w_desc, w3_desc, w_s, xa_s, xb_s, full, empty, s_words, pairs_ptr,
                          out_ptr, num_pairs, row0, row1, row_lo, block, num_steps, stride_om,
                          rw_ptr, limit, S, BM, BM >> base._EIGHTHS_BOX[u - 1],
                          base._EIGHTHS_BN2[u - 1] * (BM // 8), ONE_MUL, PG, REP, NW,
                          PRODUCER_WARPS, PRODUCER_REGS, GATED, ROW_STORES)

    @gluon.jit
    def _gated_scale_words(s_ptr, s3_ptr, expert, tile, stride_se, stride_sn4, BO: gl.constexpr,
                           PG: gl.constexpr):
        """``base.scale_words`` of a GATED program: rows [0, BO / 2) of the tile are the gate
        projection's features tile * BO / 2 .., rows [BO / 2, BO) the up projection's same
        features (s3_ptr: its scales, the same strides)."""
        F: gl.constexpr = BO // 2
        r = gl.arange(0, BO, layout=gl.SliceLayout(1, PG))
        off = expert.to(gl.int64) * stride_se + (tile * F + r % F).to(gl.int64) * (stride_sn4 * 4)
        return gl.where(r < F, s_ptr + off, s3_ptr + off).to(gl.pointer_type(gl.int32),
                                                               bitcast=True)

    @gluon.jit
    def _w4a16_prefill_ws_kernel(x_desc, xh_desc, xq_desc, xe_desc, w_desc, w3_desc, s_ptr,
                                 s3_ptr, pairs_ptr, block_expert_ptr, out_ptr, rw_ptr, limit,
                                 num_pairs, O, K, stride_se, stride_sn4, stride_om,
                                 S: gl.constexpr, BM: gl.constexpr, ONE_MUL: gl.constexpr,
                                 PARTS: gl.constexpr, PG: gl.constexpr, REP: gl.constexpr,
                                 PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                                 GATED: gl.constexpr, num_warps: gl.constexpr,
                                 EPILOGUE: gl.constexpr = 4, EPI_CHUNK: gl.constexpr = 32,
                                 ROW_STORES: gl.constexpr = False):
        # ``moe_gluon_w4a16_prefill._w4a16_prefill_kernel``'s arguments and PARTS; num_warps:
        # the consumer warpgroups' warps (the producer warp comes on top). GATED: program
        # ``tile`` multiplies the gate (w_desc, s_ptr) and up (w3_desc, s3_ptr) projections'
        # features [tile * BO / 2, (tile + 1) * BO / 2) and stores h (``swiglu_q8_store``;
        # rw_ptr: the pairs' routing weights, limit: the SwiGLU's); else w3_desc, s3_ptr,
        # rw_ptr and limit are unused
        BO: gl.constexpr = 16 * num_warps * REP
        tile = gl.program_id(0)
        block = gl.program_id(1)
        expert = gl.load(block_expert_ptr + block)
        if expert >= 0:
            gl.static_assert(_TILE % BO == 0 or BO == 2 * _TILE, "weight boxes of step tiles")
            gl.static_assert(not GATED or (BO == _TILE and REP == 2),
                             "GATED: one warpgroup of two fragments, gate and up")
            num_steps = K // 128
            if GATED:
                row0 = tile_row0(expert * O + tile * (BO // 2), num_steps, _TILE)
                row1 = row0  # the same rows of w3's (equally shaped) view
                s_words = _gated_scale_words(s_ptr, s3_ptr, expert, tile, stride_se, stride_sn4,
                                             BO, PG)
                lo = tile * (BO // 2)
            else:
                row0 = tile_row0(expert * O + tile * BO, num_steps, _TILE)
                row1 = tile_row0(expert * O + tile * BO + _TILE, num_steps, _TILE)  # BO 256
                s_words = base.scale_words(s_ptr, expert, tile, stride_se, stride_sn4, BO, PG)
                lo = tile * BO
            w_s = gl.allocate_shared_memory(gl.uint8, [S, BO, 64], w_desc.layout)
            xa_s = gl.allocate_shared_memory(gl.bfloat16, [S, BM, 64], x_desc.layout)
            xb_s = gl.allocate_shared_memory(gl.bfloat16, [S, BM, 64], x_desc.layout)
            full = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
            empty = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
            for b in gl.static_range(S):
                mbarrier.init(full.index(b), count=1)
                mbarrier.init(empty.index(b), count=1)
            used = base.parts_used(pairs_ptr, block, num_pairs, BM, PARTS)
            if PARTS == 8:
                _ws_eighths(x_desc, xh_desc, xq_desc, xe_desc, w_desc, w3_desc, w_s, xa_s, xb_s,
                            full, empty, s_words, pairs_ptr, out_ptr, num_pairs, row0, row1, lo,
                            block, num_steps, stride_om, rw_ptr, limit, used, S, BM, ONE_MUL, PG,
                            REP, num_warps, PRODUCER_WARPS, PRODUCER_REGS, GATED, ROW_STORES)
            elif PARTS == 4 and used == 1:
                _ws_block(xq_desc, xq_desc, w_desc, w3_desc, w_s, xa_s, xb_s, full, empty,
                          s_words, pairs_ptr, out_ptr, num_pairs, row0, row1, lo, block,
                          num_steps, stride_om, rw_ptr, limit, S, BM, BM // 4, 0, ONE_MUL, PG,
                          REP, num_warps, PRODUCER_WARPS, PRODUCER_REGS, GATED, ROW_STORES)
            elif PARTS >= 2 and used * (4 // PARTS) == 2:
                _ws_block(xh_desc, xh_desc, w_desc, w3_desc, w_s, xa_s, xb_s, full, empty,
                          s_words, pairs_ptr, out_ptr, num_pairs, row0, row1, lo, block,
                          num_steps, stride_om, rw_ptr, limit, S, BM, BM // 2, 0, ONE_MUL, PG,
                          REP, num_warps, PRODUCER_WARPS, PRODUCER_REGS, GATED, ROW_STORES)
            elif PARTS == 4 and used == 3:  # BM / 2 + BM / 4 (two accumulators)
                _ws_block(xh_desc, xq_desc, w_desc, w3_desc, w_s, xa_s, xb_s, full, empty,
                          s_words, pairs_ptr, out_ptr, num_pairs, row0, row1, lo, block,
                          num_steps, stride_om, rw_ptr, limit, S, BM, BM // 2, BM // 4, ONE_MUL,
                          PG, REP, num_warps, PRODUCER_WARPS, PRODUCER_REGS, GATED,
                          ROW_STORES)
            else:
                _ws_block(x_desc, x_desc, w_desc, w3_desc, w_s, xa_s, xb_s, full, empty,
                          s_words, pairs_ptr, out_ptr, num_pairs, row0, row1, lo, block,
                          num_steps, stride_om, rw_ptr, limit, S, BM, BM, 0, ONE_MUL, PG, REP,
                          num_warps, PRODUCER_WARPS, PRODUCER_REGS, GATED, ROW_STORES)
            for b in gl.static_range(S):
                mbarrier.invalidate(full.index(b))
                mbarrier.invalidate(empty.index(b))
            if GATED:  # h from the consumer's g | u tile, once for every part fill
                if EPILOGUE != 2:  # 2: a probe without it (moe_swiglu_epilogue.MODE)
                    cta_barrier()
                    epilogue.swiglu_q8_store(gated_tile(xa_s, BO, BM), pairs_ptr, rw_ptr,
                                             out_ptr, num_pairs, lo, block * BM, stride_om,
                                             limit, num_warps, EPI_CHUNK)


def launch_regs(warpgroups: int) -> int:
    """The launch's register cap per thread: two programs per SM at one consumer warpgroup
    (256 threads: 128), one at two (384 threads: 168). Triton's setmaxnreg then gives the
    consumer 216 / 232 registers inside the warp-specialized region and the producer warp
    ``PRODUCER_REGS`` (without a cap ptxas takes 255 and one program fits an SM)."""
    programs = 2 if warpgroups == 1 else 1
    return REGISTER_FILE // (programs * 128 * (warpgroups + 1)) // 8 * 8


def w4a16_prefill_ws_gemm(tokens: torch.Tensor, w: torch.Tensor, s: torch.Tensor,
                          sorted_pairs: torch.Tensor, block_expert: torch.Tensor, num_pairs: int,
                          out: torch.Tensor, block_m: int, one_mul: bool = False,
                          warpgroups: int = 1, parts: int | None = None, rep: int = 2,
                          stages: int | None = None,
                          maxnreg: int | None = None) -> torch.Tensor:
    """``moe_gluon_w4a16_prefill.w4a16_prefill_gemm``'s contract and bits on the producer-warp
    kernel (``stages``: the ring's depth, default ``STAGES`` read at the call; ``maxnreg``: the
    launch's register cap per thread, None: ``launch_regs``)."""
    _launch(tokens, (w, s), None, sorted_pairs, block_expert, num_pairs, out, block_m, one_mul,
            warpgroups, parts, rep, stages, maxnreg)
    return out


def w4a16_gated_ws_gemm(tokens: torch.Tensor, w1: torch.Tensor, s1: torch.Tensor,
                        w3: torch.Tensor, s3: torch.Tensor, sorted_pairs: torch.Tensor,
                        block_expert: torch.Tensor, num_pairs: int, route_w: torch.Tensor,
                        limit: float, out: torch.Tensor, block_m: int, one_mul: bool = False,
                        parts: int | None = None, stages: int | None = None,
                        maxnreg: int | None = None) -> torch.Tensor:
    """The gated GEMM with the SwiGLU as its epilogue (``GATED``): one program multiplies the
    gate (w1, s1) and up (w3, s3) projections of 64 intermediate features for its block's
    tokens and writes h's Q8_32 values, as ``moe_swiglu.swiglu_fake_q8_slots(g, u, route_w,
    limit, bf16, sorted_pairs, num_pairs)`` does from the two GEMMs' outputs, bit for bit:
    out (slots, I) bf16, slot i's row in the A-operand order of the down GEMM (padding slots
    unwritten). route_w: (num_pairs,) fp32, the pairs' routing weights. One warpgroup of two
    A fragments (REP 2: gate and up)."""
    assert w1.shape == w3.shape and s1.shape == s3.shape and s1.stride() == s3.stride()
    assert out.shape == (tokens.shape[0], w1.shape[1]) and out.dtype == torch.bfloat16
    rw = route_w.reshape(-1).to(torch.float32).contiguous()
    assert rw.numel() == num_pairs, (rw.numel(), num_pairs)
    _launch(tokens, (w1, s1), (w3, s3, rw, float(limit)), sorted_pairs, block_expert,
            num_pairs, out, block_m, one_mul, 1, parts, 2, stages, maxnreg)
    return out


def _launch(tokens, w_s, gated, sorted_pairs, block_expert, num_pairs, out, block_m, one_mul,
            warpgroups, parts, rep, stages, maxnreg):
    """One launch of ``_w4a16_prefill_ws_kernel`` over w_s = (w, s); ``gated`` (w3, s3, route
    weights, limit) or None. A program's output features: its rows, GATED half of them (of
    each projection)."""
    assert HAS_GLUON, "w4a16_prefill_ws_gemm needs triton's Gluon"
    w, s = w_s
    _, out_features, half = w.shape
    k = half * 2
    rows = base.ROWS * warpgroups * rep
    program_rows = rows if gated is None else rows // 2
    assert k % base.BLOCK_K == 0 and out_features % TILE_ROWS == 0 and tokens.shape[1] == k
    assert TILE_ROWS % rows == 0 or rows == 2 * TILE_ROWS, (warpgroups, rep)  # step tiles
    assert block_m in (32, 64, 128, 256) and tokens.shape[0] == sorted_pairs.numel()
    parts = base.launch_parts(base.PARTS if parts is None else parts, block_m)
    assert tokens.dtype == torch.bfloat16 and tokens.is_contiguous() and s.stride(1) % 4 == 0
    assert gated is None or epilogue.MODE in (2, 4), \
        f"moe_swiglu_epilogue.MODE {epilogue.MODE}: 4 (the epilogue) or 2 (a probe without it)"
    box = min(program_rows, TILE_ROWS)
    w_desc = tiled_descriptor(w, box)
    w3_desc, s3, rw, limit = w_desc, s, s, 0.0
    if gated is not None:
        w3, s3, rw, limit = gated
        w3_desc = tiled_descriptor(w3, box)
    grid = (out_features // program_rows, block_expert.numel())
    _w4a16_prefill_ws_kernel[grid](
        base.token_descriptor(tokens, block_m), base.token_descriptor(tokens, block_m // 2),
        base.token_descriptor(tokens, block_m // 4),
        base.token_descriptor(tokens, base.eighth_rows(block_m)),
        w_desc, w3_desc, s, s3, sorted_pairs, block_expert, out, rw, limit, num_pairs,
        out_features, k, s.stride(0), s.stride(1) // 4, out.stride(0),
        S=STAGES if stages is None else stages, BM=block_m, ONE_MUL=one_mul, PARTS=parts,
        PG=base.group_layout(warpgroups, rep), REP=rep, PRODUCER_WARPS=PRODUCER_WARPS,
        PRODUCER_REGS=PRODUCER_REGS, GATED=gated is not None, num_warps=4 * warpgroups,
        maxnreg=maxnreg or launch_regs(warpgroups),
        **({"EPILOGUE": epilogue.MODE, "EPI_CHUNK": epilogue.TOKEN_CHUNK}
           if gated is not None
           else {"ROW_STORES": bool(ROW_STORES) and block_m in ROW_STORES_BLOCK_M}))


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/test_moe_w4a16_prefill.py): REP 2 on one
    warpgroup at BM 64 and 128, REP 1 on two warpgroups at BM 128 (the 8K steps' shape), and
    two warpgroups of REP 2 (256 rows: two weight boxes a step); the eighths (PARTS 8) on the
    4K steps' shape, and with ``ROW_STORES`` (and at BM 64); the gated GEMM with its SwiGLU
    epilogue (GATED) at BM 128 and 64, and with the eighths."""
    cases = []
    for bm, stages, wg, rep, parts, gated, rows in (
            (128, 2, 1, 2, 4, False, False), (64, 3, 1, 2, 4, False, False),
            (128, 2, 2, 1, 4, False, False), (128, 3, 2, 2, 4, False, False),
            (128, 2, 1, 2, 8, False, False), (128, 2, 1, 2, 8, False, True),
            (64, 3, 1, 2, 4, False, True),
            (128, 2, 1, 2, 4, True, False), (64, 3, 1, 2, 4, True, False),
            (128, 2, 1, 2, 8, True, False)):
        box = 64 if gated else min(64 * wg * rep, 128)
        cases.append({"id": f"w4a16_prefill_ws_bm{bm}_s{stages}_wg{wg}_rep{rep}"
                            + ("_parts8" if parts == 8 else "") + ("_gated" if gated else "")
                            + ("_rowstores" if rows else ""),
                      "gluon": True, "module": __name__, "kernel": "_w4a16_prefill_ws_kernel",
                      "signature": {"x_desc": f"tma:bf16:128:{bm}x64",
                                    "xh_desc": f"tma:bf16:128:{bm // 2}x64",
                                    "xq_desc": f"tma:bf16:128:{bm // 4}x64",
                                    "xe_desc": f"tma:bf16:128:{base.eighth_rows(bm)}x64",
                                    "w_desc": f"tma:u8:0:{box}x64",
                                    "w3_desc": f"tma:u8:0:{box}x64",
                                    "s_ptr": "*u8", "s3_ptr": "*u8", "pairs_ptr": "*i32",
                                    "block_expert_ptr": "*i32", "out_ptr": "*bf16",
                                    "rw_ptr": "*fp32", "limit": "fp32",
                                    "num_pairs": "i32", "O": "i32", "K": "i32",
                                    "stride_se": "i32", "stride_sn4": "i32",
                                    "stride_om": "i32"},
                      "constexprs": {"S": stages, "BM": bm, "ONE_MUL": True, "PARTS": parts,
                                     "PG": {"call": "group_layout", "args": [wg, rep]},
                                     "REP": rep, "PRODUCER_WARPS": PRODUCER_WARPS,
                                     "PRODUCER_REGS": PRODUCER_REGS, "GATED": gated,
                                     "num_warps": 4 * wg, "EPILOGUE": 4,
                                     "EPI_CHUNK": epilogue.TOKEN_CHUNK, "ROW_STORES": rows},
                      "num_warps": 4 * wg, "num_stages": 1, "no_spill": True,
                      "maxnreg": launch_regs(wg), "expect_wgmma": True,
                      "divisible": ["K", "O"]})
    return cases
