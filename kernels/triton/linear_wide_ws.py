"""``linear_wide`` with warp specialization (Gluon, SM90) — prepared in session 14, run in session
15 (round 69a: correct, slower at 256 and 64 rows, within noise at 128); off (``linear_wide``
launches it for a config with ``WS=True``: bench/gemm_decode.py ``glws`` variants,
tests/gpu/test_linear_wide_gpu.py).

Why: ``linear_wide``'s one warpgroup both feeds and drains its ring. Its sm_90 PTX has four CTA
barriers per 64-K step — one before the stage refill, and a ``bar.sync`` + ``elect`` around
each of the two TMA copies — and the tensor core idles while they pass (round 65a: the seven
slice projections at 256 rows run at ~0.46 of the bf16 rate). Here one loader warp issues the
copies, waiting on a per-stage "empty" barrier; the consumer warpgroup (the default partition)
only waits on the "ready" barriers, decodes the weight into the wgmma A operand, issues the
wgmmas and, once they are waited, arrives on the stage's "empty" barrier. Same operands, same
products, same fp32 sums in the same order as ``linear_wide``: the same bits.

Registers: the kernel is launched with ``maxnreg(BT)`` for its 8 warps' worth (the loader's
warpgroup gives its registers up at run time: ``LOADER_REGS`` each, the consumer takes them).
"""

from __future__ import annotations

from deepinfer.kernels.triton import linear_wide as lw

LOADER_REGS = 24  # the loader warp's registers (the minimum a warp can hold)


def maxnreg(block_t: int) -> int:
    """The launch's register cap per thread (8 warps' worth per program at launch): 128 up to
    BT 128 (two programs per SM, the consumer raised to ~232); BT 256's m64n256 accumulator
    needs ptxas's 158 or more (sm_90 compile), so 168 there (one program per SM)."""
    return 168 if block_t > 128 else 128

if lw.HAS_GLUON:
    operand_layout = lw.operand_layout  # (for the compile gate's constexpr calls)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma_wait,
    )

    _LOADER_REGS = gl.constexpr(LOADER_REGS)

    @gluon.jit
    def _loader(w_desc, x_desc, w_s, x_s, ready, empty, row0, tok0, w_col0, x_col0, num_steps,
                STAGES: gl.constexpr, BO: gl.constexpr, BT: gl.constexpr, BK: gl.constexpr):
        """The loader warp: step i's weight tile [BO, BK] and token tile [BT, BK] into stage
        i % STAGES once the consumer has freed it (barriers start with phase 1 complete, so
        the first STAGES steps do not wait)."""
        for i in range(num_steps):
            st = i % STAGES
            mbarrier.wait(empty.index(st), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(st), BO * BK + BT * BK * 2)
            tma.async_copy_global_to_shared(w_desc, [row0, w_col0 + i * BK], ready.index(st),
                                            w_s.index(st))
            tma.async_copy_global_to_shared(x_desc, [tok0, x_col0 + i * BK], ready.index(st),
                                            x_s.index(st))

    @gluon.jit
    def _consumer(w_s, x_s, ready, empty, s_ptrs, s_ok, num_steps, STAGES: gl.constexpr,
                  KSUB: gl.constexpr, LW: gl.constexpr, LA: gl.constexpr, MMA: gl.constexpr,
                  BO: gl.constexpr, BT: gl.constexpr):
        """The consumer warpgroup: ``linear_wide``'s K loop without the refills; returns the
        accumulator [BO, BT] (layout MMA) as a 1-tuple."""
        s0, s1 = lw._scales(s_ptrs, s_ok, 0, num_steps, KSUB)
        n0, n1 = lw._scales(s_ptrs, s_ok, 1, num_steps, KSUB)
        mbarrier.wait(ready.index(0), 0)
        a0, a1 = lw._operands(w_s, 0, s0, s1, KSUB, LW, LA)
        acc = gl.zeros([BO, BT], gl.float32, MMA)
        for i in range(num_steps):
            acc = lw.issue_mmas(a0, a1, x_s.index(i % STAGES), acc, KSUB)
            b0, b1, n0, n1 = lw.next_operands(w_s, ready, s_ptrs, s_ok, n0, n1, i, num_steps,
                                              STAGES, KSUB, LW, LA)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            # step i's stage is consumed (its weight operand loaded during step i - 1, its
            # tokens read by the wgmmas just waited): order those shared reads before the
            # loader's next TMA write into it, then free it
            fence_async_shared()
            mbarrier.arrive(empty.index(i % STAGES), count=1)
            a0, a1 = b0, b1
        return (acc, )  # a tuple: warp_specialize flattens the default partition's results

    @gluon.jit
    def _linear_wide_ws_kernel(x_desc, w_desc, ws_ptr, out_ptr, M, O, K, W_ROWS, k_per_split,
                               split_stride, stride_wsr, stride_om, stride_og,
                               SPLIT_K: gl.constexpr, T_TILES: gl.constexpr, BT: gl.constexpr,
                               BK: gl.constexpr, STAGES: gl.constexpr, LW: gl.constexpr,
                               num_warps: gl.constexpr):
        """``linear_wide._linear_wide_kernel``'s arguments and result; num_warps = 4 (the
        consumer warpgroup) plus the loader warp."""
        BO: gl.constexpr = 16 * num_warps
        gl.static_assert(BO == 64, "one consumer warpgroup")
        KSUB: gl.constexpr = BK // 32
        gl.static_assert(KSUB == 1 or KSUB == 2, "BK must be 32 or 64")
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                       warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BT, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        pid_o, split, group, row0, tok0, k_begin, num_steps = lw.program_tile(
            O, K, k_per_split, T_TILES, BO, BT, BK)

        w_s = gl.allocate_shared_memory(gl.uint8, [STAGES, BO, BK], w_desc.layout)
        x_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, BK], x_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for b in gl.static_range(STAGES):
            mbarrier.init(ready.index(b), count=1)
            mbarrier.init(empty.index(b), count=1)

        s_ptrs, s_ok = lw.scale_pointers(ws_ptr, row0, k_begin, W_ROWS, stride_wsr, BO, LW)
        acc, = gl.warp_specialize([
            (_consumer, (w_s, x_s, ready, empty, s_ptrs, s_ok, num_steps, STAGES, KSUB, LW, LA,
                         MMA, BO, BT)),
            (_loader, (w_desc, x_desc, w_s, x_s, ready, empty, row0, tok0, k_begin,
                       group * K + k_begin, num_steps, STAGES, BO, BT, BK)),
        ], [1], [_LOADER_REGS])
        lw.store_tile(acc, out_ptr, pid_o * BO, tok0, split, group, M, O, split_stride,
                      stride_om, stride_og, SPLIT_K, T_TILES, BO, BT, MMA)


def aot_cases() -> list[dict]:
    """SM90 compile-gate cases: token tiles of 64 / 128 / 256, BK 64, split and not."""
    cases = []
    for bt, stages, split_k in ((64, 4, 2), (128, 4, 1), (256, 3, 1), (256, 4, 2)):
        case = next(c for c in lw.aot_cases() if c["constexprs"]["BK"] == 64)
        cases.append({**case, "id": f"linear_wide_ws_bt{bt}_s{stages}_split{split_k}",
                      "module": __name__, "kernel": "_linear_wide_ws_kernel",
                      "signature": {**case["signature"], "x_desc": f"tma:bf16:128:{bt}x64",
                                    "w_desc": "tma:u8:64:64x64",
                                    "out_ptr": "*fp32" if split_k > 1 else "*bf16"},
                      "constexprs": {**{k: v for k, v in case["constexprs"].items()
                                        if k != "MMA_FIRST"},  # the base kernel's order
                                     "SPLIT_K": split_k, "BT": bt, "STAGES": stages,
                                     "LW": {"call": "operand_layout", "args": [1]},
                                     "num_warps": 4},
                      "num_warps": 4, "maxnreg": maxnreg(bt)})
    return cases
