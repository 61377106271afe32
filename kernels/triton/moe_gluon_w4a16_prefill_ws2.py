"""The producer-warp prefill expert GEMM with two consumer warpgroups that share the token tile
but not a schedule (Gluon, SM90 only): the same decode, wgmmas and bits as
``moe_gluon_w4a16_prefill_ws``.

    out[p, o] = sum over K of W_e[o, k] * x[p, k]      (p: the block's pairs, sorted by expert)

Why: at 4K tokens (~64 pairs an expert) a one-warpgroup program (128 weight rows, two per SM)
reads its block's token tile [BN, K] bf16 from L2 once per 128 weight rows — twice the weights'
own bytes at BN 64 (the gated call moves ~10 GB of tokens and 4.8 GB of weights through L2).
Two consumer warpgroups on one token ring halve that. The earlier 256-row program (two
warpgroups in one partition, session 28's round 157) ran them in lockstep — one barrier a step
— and was slower; here each warpgroup is a partition of its own:

  * warpgroup 0 (the default partition) and warpgroup 1 (a worker) each own 128 weight rows
    (step tiles 2 tile and 2 tile + 1 of the projection), their own weight ring of ``SW``
    stages and barriers, and run ``moe_gluon_w4a16_prefill_ws._consumer``'s loop;
  * the token ring (``S`` stages) is shared: its full barriers are the producer's, its empty
    barriers take one arrive from each warpgroup, so the two drift apart by up to S - 1 steps
    and their decode and wgmmas interleave as two programs' would;
  * one producer warp fills the three rings in step order (each wait is for the slowest
    reader of that stage).

One program per SM (384 threads; registers: the consumers get what two one-warpgroup programs
had). Not GATED (the SwiGLU epilogue's tile would need the token ring after both warpgroups).
Shapes, contract and reference: ``moe_gluon_w4a16_prefill.w4a16_prefill_gemm``.
"""

from __future__ import annotations

from typing import Any

import torch

from deepinfer.kernels.mxfp4_w4a8_order import TILE_ROWS
from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as base
from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as ws
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON
from deepinfer.kernels.triton.moe_gluon_w4a8 import tiled_descriptor

STAGES = 3  # token ring depth (32 KB a stage at BM 128)
WEIGHT_STAGES = 4  # each warpgroup's weight ring (8 KB a stage)
LAUNCH_REGS = 168  # 65,536 / 384 threads, to a multiple of 8 (setmaxnreg redistributes)
CONSUMER_ROWS = 2 * base.ROWS  # a consumer warpgroup's weight rows (two A fragments)

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier

    from deepinfer.kernels.triton.moe_gluon import tile_row0

    _TILE = gl.constexpr(TILE_ROWS)

    @gluon.jit
    def _producer2(x_desc, x2_desc, w_desc, w_s0, w_s1, xa_s, xb_s, full0, full1, full_x,
                   empty0, empty1, empty_x, row0, row1, x_row0, num_steps, S: gl.constexpr,
                   SW: gl.constexpr, BN: gl.constexpr, BN2: gl.constexpr):
        """Turn j: warpgroup 0's and 1's weight tiles of step j into their rings (once each
        freed step j - SW), and the tokens of step j - (SW - S) into the shared ring (once
        both freed step j - SW). The weights run SW - S steps ahead of the tokens."""
        AHEAD: gl.constexpr = SW - S
        for j in range(num_steps + AHEAD):
            if j < num_steps:
                st = j % SW
                ph = ((j // SW) & 1) ^ 1
                mbarrier.wait(empty0.index(st), ph, pred=j >= SW)
                mbarrier.expect(full0.index(st), _TILE * 64)
                ws._put_w(w_desc, w_desc, w_s0.index(st), full0.index(st), row0, row0, j, _TILE,
                          False)
                mbarrier.wait(empty1.index(st), ph, pred=j >= SW)
                mbarrier.expect(full1.index(st), _TILE * 64)
                ws._put_w(w_desc, w_desc, w_s1.index(st), full1.index(st), row1, row1, j, _TILE,
                          False)
            t = j - AHEAD
            if t >= 0:
                xt = t % S
                mbarrier.wait(empty_x.index(xt), ((t // S) & 1) ^ 1, pred=t >= S)
                mbarrier.expect(full_x.index(xt), (BN + BN2) * 256)
                ws._put_x(x_desc, x2_desc, xa_s.index(xt), xb_s.index(xt), full_x.index(xt),
                          x_row0, t, BN, BN2)

    @gluon.jit
    def _consumer2(w_s, xa_s, xb_s, full, full_x, empty, empty_x, s_ptr, expert, step_tile,
                   stride_se, stride_sn4, pairs_ptr, out_ptr, num_pairs, block, num_steps,
                   stride_om, S: gl.constexpr, SW: gl.constexpr, BM: gl.constexpr,
                   BN: gl.constexpr, BN2: gl.constexpr, ONE_MUL: gl.constexpr,
                   PG: gl.constexpr):
        """One consumer warpgroup: the 128 weight rows of step tile ``step_tile`` (its scale
        pointers built here: a partition takes scalars, not tensors of pointers)."""
        R: gl.constexpr = _TILE
        s_words = base.scale_words(s_ptr, expert, step_tile, stride_se, stride_sn4, R, PG)
        ws._consumer(w_s, xa_s, xb_s, full, full_x, empty, s_words, pairs_ptr, out_ptr,
                     num_pairs, step_tile * R, block, num_steps, stride_om, pairs_ptr, 0.0, S,
                     SW, BM, BN, BN2, ONE_MUL, PG, 2, 4, False, empty_x, True)

    @gluon.jit
    def _ws2_block(x_desc, x2_desc, w_desc, w_s0, w_s1, xa_s, xb_s, full0, full1, full_x,
                   empty0, empty1, empty_x, s_ptr, expert, tile, stride_se, stride_sn4,
                   pairs_ptr, out_ptr, num_pairs, row0, row1, block, num_steps, stride_om,
                   S: gl.constexpr, SW: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                   BN2: gl.constexpr, ONE_MUL: gl.constexpr, PG: gl.constexpr,
                   CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
        """One block's program at N = BN (+ BN2): two consumer warpgroups and a producer
        warp."""
        gl.warp_specialize([
            (_consumer2, (w_s0, xa_s, xb_s, full0, full_x, empty0, empty_x, s_ptr, expert,
                          2 * tile, stride_se, stride_sn4, pairs_ptr, out_ptr, num_pairs, block,
                          num_steps, stride_om, S, SW, BM, BN, BN2, ONE_MUL, PG)),
            (_consumer2, (w_s1, xa_s, xb_s, full1, full_x, empty1, empty_x, s_ptr, expert,
                          2 * tile + 1, stride_se, stride_sn4, pairs_ptr, out_ptr, num_pairs,
                          block, num_steps, stride_om, S, SW, BM, BN, BN2, ONE_MUL, PG)),
            (_producer2, (x_desc, x2_desc, w_desc, w_s0, w_s1, xa_s, xb_s, full0, full1, full_x,
                          empty0, empty1, empty_x, row0, row1, block * BM, num_steps, S, SW,
                          BN, BN2)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])

    @gluon.jit
    def _w4a16_prefill_ws2_kernel(x_desc, xh_desc, xq_desc, xe_desc, w_desc, s_ptr, pairs_ptr,
                                  block_expert_ptr, out_ptr, num_pairs, O, K, stride_se,
                                  stride_sn4, stride_om, S: gl.constexpr, SW: gl.constexpr,
                                  BM: gl.constexpr, ONE_MUL: gl.constexpr, PG: gl.constexpr,
                                  CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
        # ``moe_gluon_w4a16_prefill_ws._w4a16_prefill_ws_kernel``'s arguments at PARTS 8, REP
        # 2, one warpgroup, not GATED; program ``tile`` owns weight rows [256 tile, 256 tile +
        # 256): warpgroup c the 128 of step tile 2 tile + c
        tile = gl.program_id(0)
        block = gl.program_id(1)
        expert = gl.load(block_expert_ptr + block)
        if expert >= 0:
            num_steps = K // 128
            R: gl.constexpr = _TILE
            row0 = tile_row0(expert * O + (2 * tile) * R, num_steps, _TILE)
            row1 = tile_row0(expert * O + (2 * tile + 1) * R, num_steps, _TILE)
            w_s0 = gl.allocate_shared_memory(gl.uint8, [SW, R, 64], w_desc.layout)
            w_s1 = gl.allocate_shared_memory(gl.uint8, [SW, R, 64], w_desc.layout)
            xa_s = gl.allocate_shared_memory(gl.bfloat16, [S, BM, 64], x_desc.layout)
            xb_s = gl.allocate_shared_memory(gl.bfloat16, [S, BM, 64], x_desc.layout)
            full0 = gl.allocate_shared_memory(gl.int64, [SW, 1], mbarrier.MBarrierLayout())
            full1 = gl.allocate_shared_memory(gl.int64, [SW, 1], mbarrier.MBarrierLayout())
            empty0 = gl.allocate_shared_memory(gl.int64, [SW, 1], mbarrier.MBarrierLayout())
            empty1 = gl.allocate_shared_memory(gl.int64, [SW, 1], mbarrier.MBarrierLayout())
            full_x = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
            empty_x = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
            for b in gl.static_range(SW):
                mbarrier.init(full0.index(b), count=1)
                mbarrier.init(full1.index(b), count=1)
                mbarrier.init(empty0.index(b), count=1)
                mbarrier.init(empty1.index(b), count=1)
            for b in gl.static_range(S):
                mbarrier.init(full_x.index(b), count=1)
                mbarrier.init(empty_x.index(b), count=2)  # one arrive per consumer
            used = base.parts_used(pairs_ptr, block, num_pairs, BM, 8)
            descs = (x_desc, xh_desc, xq_desc, xe_desc)  # token boxes of BM >> i rows
            for u in gl.static_range(1, 8):
                if base.eighths_hit(used, u):
                    _ws2_block(descs[base._EIGHTHS_BOX[u - 1]],
                               descs[base._EIGHTHS_BOX2[u - 1]], w_desc, w_s0, w_s1, xa_s,
                               xb_s, full0, full1, full_x, empty0, empty1, empty_x, s_ptr,
                               expert, tile, stride_se, stride_sn4, pairs_ptr, out_ptr,
                               num_pairs, row0, row1, block, num_steps, stride_om, S, SW, BM,
                               BM >> base._EIGHTHS_BOX[u - 1],
                               base._EIGHTHS_BN2[u - 1] * (BM // 8), ONE_MUL, PG,
                               CONSUMER_REGS, PRODUCER_REGS)
            for b in gl.static_range(SW):
                mbarrier.invalidate(full0.index(b))
                mbarrier.invalidate(full1.index(b))
                mbarrier.invalidate(empty0.index(b))
                mbarrier.invalidate(empty1.index(b))
            for b in gl.static_range(S):
                mbarrier.invalidate(full_x.index(b))
                mbarrier.invalidate(empty_x.index(b))


def w4a16_prefill_ws2_gemm(tokens: torch.Tensor, w: torch.Tensor, s: torch.Tensor,
                           sorted_pairs: torch.Tensor, block_expert: torch.Tensor,
                           num_pairs: int, out: torch.Tensor, block_m: int, one_mul: bool = False,
                           stages: int | None = None, weight_stages: int | None = None,
                           consumer_regs: int = 216) -> torch.Tensor:
    """``moe_gluon_w4a16_prefill.w4a16_prefill_gemm``'s contract and bits (PARTS 8, BM 128)
    on two consumer warpgroups sharing the token ring: programs of 256 weight rows (the
    projection's rows a multiple of 256). ``stages`` / ``weight_stages``: the token ring's and
    each weight ring's depth (defaults ``STAGES`` / ``WEIGHT_STAGES``, read at the call);
    ``consumer_regs``: the consumers' setmaxnreg."""
    assert HAS_GLUON, "w4a16_prefill_ws2_gemm needs triton's Gluon"
    _, out_features, half = w.shape
    k = half * 2
    depth = STAGES if stages is None else stages
    w_depth = max(depth, WEIGHT_STAGES if weight_stages is None else weight_stages)
    assert k % base.BLOCK_K == 0 and out_features % (2 * TILE_ROWS) == 0, (k, out_features)
    assert TILE_ROWS == CONSUMER_ROWS, (TILE_ROWS, CONSUMER_ROWS)  # a consumer: one step tile
    assert block_m == 128 and tokens.shape[0] == sorted_pairs.numel() and tokens.shape[1] == k
    assert tokens.dtype == torch.bfloat16 and tokens.is_contiguous() and s.stride(1) % 4 == 0
    grid = (out_features // (2 * TILE_ROWS), block_expert.numel())
    _w4a16_prefill_ws2_kernel[grid](
        base.token_descriptor(tokens, block_m), base.token_descriptor(tokens, block_m // 2),
        base.token_descriptor(tokens, block_m // 4),
        base.token_descriptor(tokens, base.eighth_rows(block_m)),
        tiled_descriptor(w, TILE_ROWS), s, sorted_pairs, block_expert, out, num_pairs,
        out_features, k, s.stride(0), s.stride(1) // 4, out.stride(0), S=depth, SW=w_depth,
        BM=block_m, ONE_MUL=one_mul, PG=base.group_layout(1, 2), CONSUMER_REGS=consumer_regs,
        PRODUCER_REGS=ws.PRODUCER_REGS, num_warps=4, maxnreg=LAUNCH_REGS)
    return out


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/test_moe_w4a16_prefill.py): the 4K
    shape (BM 128, eighths) at token / weight rings 3 / 4 and 2 / 6."""
    cases = []
    for stages, sw in ((3, 4), (2, 6)):
        cases.append({"id": f"w4a16_prefill_ws2_s{stages}_sw{sw}", "gluon": True,
                      "module": __name__, "kernel": "_w4a16_prefill_ws2_kernel",
                      "signature": {"x_desc": "tma:bf16:128:128x64",
                                    "xh_desc": "tma:bf16:128:64x64",
                                    "xq_desc": "tma:bf16:128:32x64",
                                    "xe_desc": f"tma:bf16:128:{base.eighth_rows(128)}x64",
                                    "w_desc": "tma:u8:0:128x64",
                                    "s_ptr": "*u8", "pairs_ptr": "*i32",
                                    "block_expert_ptr": "*i32", "out_ptr": "*bf16",
                                    "num_pairs": "i32", "O": "i32", "K": "i32",
                                    "stride_se": "i32", "stride_sn4": "i32",
                                    "stride_om": "i32"},
                      "constexprs": {"S": stages, "SW": sw, "BM": 128, "ONE_MUL": True,
                                     "PG": {"call": "group_layout", "args": [1, 2]},
                                     "CONSUMER_REGS": 216,
                                     "PRODUCER_REGS": ws.PRODUCER_REGS},
                      "num_warps": 4, "num_stages": 1, "no_spill": True,
                      "maxnreg": LAUNCH_REGS, "expect_wgmma": True,
                      "divisible": ["K", "O"]})
    return cases


group_layout = base.group_layout  # the consumers' weight words in registers (compile gate)
