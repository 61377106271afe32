"""The gated prefill expert GEMM with its SwiGLU epilogue as a persistent kernel whose epilogue
runs on warps of its own (Gluon, SM90 only): the bits of ``moe_gluon_w4a16_prefill_ws.
w4a16_gated_ws_gemm`` (h's Q8_32 values in the down GEMM's token order), with each block's
epilogue overlapping the next block's K loop.

    h[slot, f] = Q8_32(bf16(w * silu(min(g, L)) * clamp(u, -L, L))),
    g | u = the gate | up projections of the slot's token (``moe_swiglu_epilogue``)

Why: in the one-block-a-program kernel (``w4a16_gated_ws_gemm``) the epilogue follows the K loop
in the same warps: H100 rounds 208 / 210 timed the K loop alone 6 % faster than the two gated
GEMMs, the epilogue's ~300 µs a 4K call eating that. Here a program walks work items (a weight
tile of 64 intermediate features x a block of BM slots; item = program + k x programs, the tiles
of a block adjacent, as the one-block grid orders them) with three partitions:

  * the producer warp (``moe_gluon_w4a16_prefill_ws._producer``) fills the ring item after item
    (its step count runs on across items, so the next item's first stages load while this
    item's last steps compute);
  * the consumer warpgroup (the default partition) runs each item's K loop
    (``consumer_loop``), then waits for the epilogue to have read the previous item's tile,
    stores g | u as bf16 into the shared tile H ([128, BM], ``moe_swiglu_epilogue.H_SHARED``)
    and signals it — and goes on to the next item's K loop;
  * the epilogue warps (``EPI_WARPS``) wait for H, run ``moe_swiglu_epilogue.swiglu_q8_store``
    on it (the quad layout by default: ``EPI_MODE``) and free it.

Registers (two programs an SM, 128 a thread at the launch): the producer warp and the two
epilogue warps share one warpgroup at ``WORKER_REGS`` (56), the consumer gets 200 — no spills
in either (sm_90, session 43). Shared memory: the ring (2 stages x (8 KB weights + 2 x 16 KB
tokens) at BM 128) + H (32 KB) + barriers = 114,980 bytes a program: two fit an SM's 228 KiB
(with 1 KiB each reserved).

Eighths only (PARTS 8 from BM 128, the 4K steps' shape): each partition reads the block's used
eighths and runs the matching tile set, as ``_ws_eighths`` does. Prepared in session 43, not
yet run on a GPU: its bit check is ``tests/gpu/test_moe_gluon_gpu.py``
(``test_gated_persistent_matches_two_gemms``), its timing ``bench/gated_swiglu.py``
(the "persistent" rows). Shapes and contract: ``w4a16_gated_ws_gemm``.
"""

from __future__ import annotations

from typing import Any

import torch

from deepinfer.kernels.mxfp4_w4a8_order import TILE_ROWS
from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as base
from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as ws
from deepinfer.kernels.triton import moe_swiglu_epilogue as epilogue
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON
from deepinfer.kernels.triton.moe_gluon_w4a8 import tiled_descriptor

PROGRAMS_PER_SM = 2  # the launch's programs: two an SM (the one-block kernel's occupancy)
EPI_WARPS = 2  # warps of the epilogue partition (with the producer warp: one warpgroup)
# registers a thread of the producer and epilogue partitions (setmaxnreg); the consumer gets
# 256 - WORKER_REGS. sm_90 (session 43): 56 -> 200, no spills anywhere; 64 -> 192, 32 local
# loads / stores in the consumer (the persistent loop's scalars on top of the K loop's 128
# accumulator registers)
WORKER_REGS = 56
EPI_MODE = 3  # the epilogue's layout: 3 quads, 4 octets (``moe_swiglu_epilogue.MODE``)
EPI_CHUNK = 32  # tokens an epilogue pass holds (a multiple of 8 x EPI_WARPS)
BLOCK_M = 128  # slots a block (the eighths need 128)
group_layout = base.group_layout  # the consumer's weight words in registers (compile gate)

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier

    from deepinfer.kernels.triton.moe_gluon import cta_barrier, tile_row0

    _TILE = gl.constexpr(TILE_ROWS)

    @gluon.jit
    def _item(item, tiles, block_expert_ptr):
        """Work item -> (block, weight tile, its expert; -1: an idle block)."""
        block = item // tiles
        return block, item % tiles, gl.load(block_expert_ptr + block)

    @gluon.jit
    def _producer_items(x_desc, xh_desc, xq_desc, xe_desc, w_desc, w3_desc, w_s, xa_s, xb_s,
                        full, empty, pairs_ptr, block_expert_ptr, num_pairs, O, num_steps,
                        num_items, tiles, S: gl.constexpr, BM: gl.constexpr):
        """The producer warp over the program's items: each item's steps into the ring after
        the previous item's (``ws._producer`` at the item's eighths)."""
        descs = (x_desc, xh_desc, xq_desc, xe_desc)
        step0 = 0
        for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
            block, tile, expert = _item(item, tiles, block_expert_ptr)
            if expert >= 0:
                row0 = tile_row0(expert * O + tile * (_TILE // 2), num_steps, _TILE)
                used = base.parts_used(pairs_ptr, block, num_pairs, BM, 8)
                for u in gl.static_range(1, 8):
                    if base.eighths_hit(used, u):
                        ws._producer(descs[base._EIGHTHS_BOX[u - 1]],
                                     descs[base._EIGHTHS_BOX2[u - 1]], w_desc, w3_desc, w_s,
                                     xa_s, xb_s, full, empty, row0, row0, block * BM,
                                     num_steps, step0, S, _TILE, BM >> base._EIGHTHS_BOX[u - 1],
                                     base._EIGHTHS_BN2[u - 1] * (BM // 8), True)
                step0 += num_steps

    @gluon.jit
    def _consumer_items(w_s, xa_s, xb_s, h_s, full, empty, h_full, h_empty, s_ptr, s3_ptr,
                        pairs_ptr, block_expert_ptr, num_pairs, num_steps, num_items, tiles,
                        stride_se, stride_sn4, S: gl.constexpr, BM: gl.constexpr,
                        ONE_MUL: gl.constexpr, PG: gl.constexpr, NW: gl.constexpr):
        """The consumer warpgroup over the program's items: the K loop, then g | u into H once
        the epilogue has read the previous item's (the handoff's k-th use), then H signalled."""
        step0 = 0
        k = 0
        for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
            block, tile, expert = _item(item, tiles, block_expert_ptr)
            if expert >= 0:
                s_words = ws._gated_scale_words(s_ptr, s3_ptr, expert, tile, stride_se,
                                                stride_sn4, _TILE, PG)
                used = base.parts_used(pairs_ptr, block, num_pairs, BM, 8)
                for u in gl.static_range(1, 8):
                    if base.eighths_hit(used, u):
                        BN: gl.constexpr = BM >> base._EIGHTHS_BOX[u - 1]
                        BN2: gl.constexpr = base._EIGHTHS_BN2[u - 1] * (BM // 8)
                        acc, acc2 = ws.consumer_loop(w_s, xa_s, xb_s, full, empty, s_words,
                                                     num_steps, step0, S, BN, BN2, ONE_MUL, PG,
                                                     2, NW)
                        mbarrier.wait(h_empty, (k & 1) ^ 1, pred=k > 0)
                        ws.store_gated(h_s, acc, acc2, BN, BN2)
                cta_barrier()  # every warp's part of H is written before the one arrive
                mbarrier.arrive(h_full, count=1)
                step0 += num_steps
                k += 1

    @gluon.jit
    def _epilogue_items(h_s, h_full, h_empty, pairs_ptr, block_expert_ptr, rw_ptr, out_ptr,
                        num_pairs, num_items, tiles, stride_om, limit, BM: gl.constexpr,
                        MODE: gl.constexpr, CHUNK: gl.constexpr, NW: gl.constexpr):
        """The epilogue warps over the program's items: h from H once the consumer signalled
        it, then H freed."""
        k = 0
        for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
            block, tile, expert = _item(item, tiles, block_expert_ptr)
            if expert >= 0:
                mbarrier.wait(h_full, k & 1)
                epilogue.swiglu_q8_store(h_s, pairs_ptr, rw_ptr, out_ptr, num_pairs,
                                         tile * (_TILE // 2), block * BM, stride_om, limit, NW,
                                         True, CHUNK, 1 if MODE == 3 else 2)
                cta_barrier()  # every warp has read H before the one arrive
                mbarrier.arrive(h_empty, count=1)
                k += 1

    @gluon.jit
    def _gated_persistent_kernel(x_desc, xh_desc, xq_desc, xe_desc, w_desc, w3_desc, s_ptr,
                                 s3_ptr, pairs_ptr, block_expert_ptr, out_ptr, rw_ptr, limit,
                                 num_pairs, O, K, stride_se, stride_sn4, stride_om, num_items,
                                 tiles, S: gl.constexpr, BM: gl.constexpr,
                                 ONE_MUL: gl.constexpr, PG: gl.constexpr,
                                 PRODUCER_WARPS: gl.constexpr, EPI_WARPS: gl.constexpr,
                                 WORKER_REGS: gl.constexpr, EPI_MODE: gl.constexpr,
                                 EPI_CHUNK: gl.constexpr, num_warps: gl.constexpr):
        # ``ws._w4a16_prefill_ws_kernel``'s GATED arguments (PARTS 8, REP 2, one consumer
        # warpgroup) plus the items: num_items = tiles x blocks, item = block x tiles + tile
        gl.static_assert(num_warps == 4, "one consumer warpgroup (REP 2: gate and up)")
        num_steps = K // 128
        w_s = gl.allocate_shared_memory(gl.uint8, [S, _TILE, 64], w_desc.layout)
        xa_s = gl.allocate_shared_memory(gl.bfloat16, [S, BM, 64], x_desc.layout)
        xb_s = gl.allocate_shared_memory(gl.bfloat16, [S, BM, 64], x_desc.layout)
        h_s = gl.allocate_shared_memory(gl.bfloat16, [_TILE, BM], epilogue.H_SHARED)
        full = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
        h_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for b in gl.static_range(S):
            mbarrier.init(full.index(b), count=1)
            mbarrier.init(empty.index(b), count=1)
        mbarrier.init(h_bars.index(0), count=1)
        mbarrier.init(h_bars.index(1), count=1)
        h_full = h_bars.index(0)
        h_empty = h_bars.index(1)
        gl.warp_specialize([
            (_consumer_items, (w_s, xa_s, xb_s, h_s, full, empty, h_full, h_empty, s_ptr, s3_ptr,
                               pairs_ptr, block_expert_ptr, num_pairs, num_steps, num_items,
                               tiles, stride_se, stride_sn4, S, BM, ONE_MUL, PG, num_warps)),
            (_producer_items, (x_desc, xh_desc, xq_desc, xe_desc, w_desc, w3_desc, w_s, xa_s,
                               xb_s, full, empty, pairs_ptr, block_expert_ptr, num_pairs, O,
                               num_steps, num_items, tiles, S, BM)),
            (_epilogue_items, (h_s, h_full, h_empty, pairs_ptr, block_expert_ptr, rw_ptr,
                               out_ptr, num_pairs, num_items, tiles, stride_om, limit, BM,
                               EPI_MODE, EPI_CHUNK, EPI_WARPS)),
        ], [PRODUCER_WARPS, EPI_WARPS], [WORKER_REGS, WORKER_REGS])
        for b in gl.static_range(S):
            mbarrier.invalidate(full.index(b))
            mbarrier.invalidate(empty.index(b))
        mbarrier.invalidate(h_full)
        mbarrier.invalidate(h_empty)


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (the launch's programs: PROGRAMS_PER_SM each)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def gated_persistent_gemm(tokens: torch.Tensor, w1: torch.Tensor, s1: torch.Tensor,
                          w3: torch.Tensor, s3: torch.Tensor, sorted_pairs: torch.Tensor,
                          block_expert: torch.Tensor, num_pairs: int, route_w: torch.Tensor,
                          limit: float, out: torch.Tensor, block_m: int,
                          one_mul: bool = False) -> torch.Tensor:
    """``ws.w4a16_gated_ws_gemm``'s contract and bits (h's Q8_32 values into ``out``'s slot
    rows, padding slots unwritten) on the persistent kernel; block_m 128 (the eighths)."""
    assert HAS_GLUON, "gated_persistent_gemm needs triton's Gluon"
    assert block_m == BLOCK_M, f"gated_persistent_gemm: block_m {block_m}, expected {BLOCK_M}"
    assert w1.shape == w3.shape and s1.shape == s3.shape and s1.stride() == s3.stride()
    _, features, half = w1.shape
    k = half * 2
    assert k % base.BLOCK_K == 0 and features % (TILE_ROWS // 2) == 0 and tokens.shape[1] == k
    assert tokens.shape[0] == sorted_pairs.numel() and tokens.dtype == torch.bfloat16
    assert tokens.is_contiguous() and s1.stride(1) % 4 == 0
    assert out.shape == (tokens.shape[0], features) and out.dtype == torch.bfloat16
    assert EPI_CHUNK % (8 * EPI_WARPS) == 0 and EPI_MODE in (3, 4), (EPI_CHUNK, EPI_MODE)
    rw = route_w.reshape(-1).to(torch.float32).contiguous()
    assert rw.numel() == num_pairs, (rw.numel(), num_pairs)
    tiles = features // (TILE_ROWS // 2)
    num_items = tiles * block_expert.numel()
    grid = (max(1, min(num_items, PROGRAMS_PER_SM * num_sms(tokens.device))),)
    _gated_persistent_kernel[grid](
        base.token_descriptor(tokens, block_m), base.token_descriptor(tokens, block_m // 2),
        base.token_descriptor(tokens, block_m // 4),
        base.token_descriptor(tokens, base.eighth_rows(block_m)),
        tiled_descriptor(w1, TILE_ROWS // 2), tiled_descriptor(w3, TILE_ROWS // 2), s1, s3,
        sorted_pairs, block_expert, out, rw, float(limit), num_pairs, features, k,
        s1.stride(0), s1.stride(1) // 4, out.stride(0), num_items, tiles,
        S=ws.STAGES, BM=block_m, ONE_MUL=one_mul, PG=base.group_layout(1, 2),
        PRODUCER_WARPS=ws.PRODUCER_WARPS, EPI_WARPS=EPI_WARPS, WORKER_REGS=WORKER_REGS,
        EPI_MODE=EPI_MODE, EPI_CHUNK=EPI_CHUNK, num_warps=4, maxnreg=ws.launch_regs(1))
    return out


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/test_moe_w4a16_prefill.py): the 4K steps'
    shape (BM 128, the eighths, 2 stages) with the epilogue in the quad and octet layouts."""
    cases = []
    for mode in (3, 4):
        cases.append({"id": f"gated_persistent_bm128_s2_epilogue{mode}", "gluon": True,
                      "module": __name__, "kernel": "_gated_persistent_kernel",
                      "signature": {"x_desc": "tma:bf16:128:128x64",
                                    "xh_desc": "tma:bf16:128:64x64",
                                    "xq_desc": "tma:bf16:128:32x64",
                                    "xe_desc": "tma:bf16:128:16x64",
                                    "w_desc": "tma:u8:0:64x64", "w3_desc": "tma:u8:0:64x64",
                                    "s_ptr": "*u8", "s3_ptr": "*u8", "pairs_ptr": "*i32",
                                    "block_expert_ptr": "*i32", "out_ptr": "*bf16",
                                    "rw_ptr": "*fp32", "limit": "fp32", "num_pairs": "i32",
                                    "O": "i32", "K": "i32", "stride_se": "i32",
                                    "stride_sn4": "i32", "stride_om": "i32",
                                    "num_items": "i32", "tiles": "i32"},
                      "constexprs": {"S": ws.STAGES, "BM": BLOCK_M, "ONE_MUL": True,
                                     "PG": {"call": "group_layout", "args": [1, 2]},
                                     "PRODUCER_WARPS": ws.PRODUCER_WARPS,
                                     "EPI_WARPS": EPI_WARPS, "WORKER_REGS": WORKER_REGS,
                                     "EPI_MODE": mode, "EPI_CHUNK": EPI_CHUNK, "num_warps": 4},
                      "num_warps": 4, "num_stages": 1, "no_spill": True,
                      "maxnreg": ws.launch_regs(1), "expect_wgmma": True,
                      "divisible": ["K", "O"]})
    return cases
