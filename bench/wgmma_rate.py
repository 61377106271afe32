"""The register-A bf16 wgmma's pace by N, alone: what the prefill expert GEMM's loop shape
(``moe_gluon_w4a16_prefill``: per 32-K group one ``m64 nBN k32`` wgmma per A fragment, then
a wait) could reach with nothing else in the loop — no decode, no TMA, no mbarriers.

    python bench/wgmma_rate.py [--ns 16 32 48 64 80 96 128] [--steps 640] [--per-sm 1 2 3]

Each program is one warpgroup (4 warps) holding REP A fragments [64, 32] bf16 in registers
(stacked on M, loaded so ptxas cannot rebuild them; issued and waited by the kernel's own
``_mma_group`` / ``_wait``) and a token tile [BN + BN2, 64] bf16 in shared memory
(written once); per K step it issues 4 groups of REP wgmmas (acc += A @ tile[:, 32 g % 64 ..]ᵀ,
K 32 each: two HGMMA k16) and waits after each group (``wait`` "group", the kernel's
pattern) or once per step ("step"); BN2 > 0 adds the eighths' second accumulator (the same A
against BN2 more tokens). ``--per-sm`` programs an SM are launched (the expert GEMM runs two;
no register cap: REP 2 at N 128 holds a 128-register accumulator, as the kernel's consumer
under its setmaxnreg of 216, so more than two may not fit at once).
Prints TFLOP/s and the share of the bf16 ceiling measured in the same run (torch.matmul
8192³, which runs below the tensor cores' peak — this probe, with no memory traffic, may
pass 1.0) per (tokens, REP, wait, programs an SM): the tensor pace the expert GEMM's eighths can
reach at 4K tokens (~64 pairs an expert: N 16..128). GPU only (Gluon); the sm_90 compile
gate is ``aot_cases()`` (tests/kernels/triton/test_wgmma_rate.py).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

from deepinfer.kernels.triton.moe_gluon import HAS_GLUON

ROWS = 64  # an A fragment's rows (wgmma M)
TILE_ROWS = 128  # the token tile's rows in shared memory (BN + BN2 <= 128)

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared

    # the kernel's own group issue and wait
    from deepinfer.kernels.triton.moe_gluon_w4a16_prefill import _mma_group, _wait

    _ROWS = gl.constexpr(ROWS)
    _TILE_ROWS = gl.constexpr(TILE_ROWS)

    @gluon.jit
    def _wgmma_rate_kernel(a_ptr, out_ptr, steps, BN: gl.constexpr, BN2: gl.constexpr,
                           REP: gl.constexpr, WAIT_GROUP: gl.constexpr):
        # one warpgroup: acc [64 REP, BN] (+ acc2 [64 REP, BN2]) += A [64 REP, 32] @
        # tile[:, 32 g]ᵀ, the REP fragments stacked on M as the kernel's
        BO: gl.constexpr = _ROWS * REP
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        TILE: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16,
                                                  rank=2)
        FILL: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        pid = gl.program_id(0)
        x_s = gl.allocate_shared_memory(gl.bfloat16, [_TILE_ROWS, 64], TILE)
        x_s.store(gl.full([_TILE_ROWS, 64], 0.5, gl.bfloat16, FILL))
        fence_async_shared()
        # the fragments loaded (a_ptr: [128, 32] bf16), not constants: ptxas would rebuild
        # constant operands in the same registers before each wgmma and wait for the last
        r = gl.arange(0, BO, layout=gl.SliceLayout(1, LA))
        c = gl.arange(0, 32, layout=gl.SliceLayout(0, LA))
        a = gl.load(a_ptr + r[:, None] * 32 + c[None, :])
        acc = gl.zeros([BO, BN], gl.float32, MMA)
        acc2 = acc
        if BN2 > 0:
            MMA2: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                            warps_per_cta=[4, 1],
                                                            instr_shape=[16, BN2, 16])
            acc2 = gl.zeros([BO, BN2], gl.float32, MMA2)
        for _ in range(steps):
            for g in gl.static_range(4):
                acc, acc2 = _mma_group(a, x_s, acc, acc2, 0, BN, BN2, (g % 2) * 32)
                if WAIT_GROUP:
                    acc, acc2 = _wait(acc, acc2, BN2)
            if not WAIT_GROUP:
                acc, acc2 = _wait(acc, acc2, BN2)
        total = gl.sum(gl.sum(acc, axis=1), axis=0)
        if BN2 > 0:
            total += gl.sum(gl.sum(acc2, axis=1), axis=0)
        gl.store(out_ptr + pid, total)


def flops(programs: int, steps: int, bn: int, bn2: int, rep: int) -> int:
    """The multiply-adds' FLOPs of a launch: per program, step and group REP fragments of
    64 rows x (BN + BN2) tokens x 32 K."""
    return 2 * programs * steps * 4 * rep * ROWS * (bn + bn2) * 32


def launch(a: torch.Tensor, out: torch.Tensor, steps: int, bn: int, bn2: int, rep: int,
           wait_group: bool):
    """One launch over ``out.numel()`` programs (the block scheduler spreads them over the
    SMs); a: the A fragments [128, 32] bf16 (the first 64 REP rows used)."""
    _wgmma_rate_kernel[(out.numel(),)](a, out, steps, BN=bn, BN2=bn2, REP=rep,
                                       WAIT_GROUP=wait_group, num_warps=4)


def aot_cases() -> list[dict[str, Any]]:
    """sm_90 compile-gate cases: the eighths' shapes at REP 2, waits per group and per step."""
    cases = []
    for bn, bn2, rep, wait_group in ((64, 0, 2, True), (64, 16, 2, True), (16, 0, 2, True),
                                     (128, 0, 2, False), (32, 0, 1, True)):
        cases.append({"id": f"wgmma_rate_n{bn}_{bn2}_rep{rep}_{'g' if wait_group else 's'}",
                      "gluon": True, "module": "wgmma_rate", "kernel": "_wgmma_rate_kernel",
                      "signature": {"a_ptr": "*bf16", "out_ptr": "*fp32", "steps": "i32"},
                      "constexprs": {"BN": bn, "BN2": bn2, "REP": rep,
                                     "WAIT_GROUP": wait_group},
                      "num_warps": 4, "num_stages": 1, "no_spill": True,
                      "expect_wgmma": True})
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 32, 48, 64, 80, 96, 128],
                    help="tokens per program (BN + BN2: 48 = 32 + 16, 80 = 64 + 16, 96 = 64 + "
                         "32, as the eighths split them)")
    ap.add_argument("--steps", type=int, default=640, help="K steps of 128 per program")
    ap.add_argument("--per-sm", type=int, nargs="+", default=[2, 1, 3],
                    help="programs launched per SM")
    args = ap.parse_args()
    split = {16: (16, 0), 32: (32, 0), 48: (32, 16), 64: (64, 0), 80: (64, 16), 96: (64, 32),
             112: (64, 48), 128: (128, 0)}
    bad = [n for n in args.ns if n not in split or n == 112]
    if bad:
        ap.error(f"--ns {bad}: expected some of 16 32 48 64 80 96 128")
    if not (HAS_GLUON and torch.cuda.is_available()):
        print("wgmma_rate.py: needs an SM90 GPU and triton's Gluon")
        return 1
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_common import roofline

    rl = roofline()
    bf16 = rl.measure_ceilings()["bf16_flops_per_s"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a = (torch.rand(2 * ROWS, 32, device="cuda") - 0.5).to(torch.bfloat16)
    print(f"{torch.cuda.get_device_name()}: bf16 ceiling {bf16 / 1e12:.0f} TFLOP/s; {sms} SMs, "
          f"{args.steps} steps a program")
    print("| tokens (BN + BN2) | REP | wait | programs an SM | ms | TFLOP/s "
          "| of the matmul ceiling |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for per_sm in args.per_sm:
        out = torch.empty(per_sm * sms, device="cuda")
        for n in args.ns:
            bn, bn2 = split[n]
            for rep in (2, 1):
                # a wait per step with a second accumulator: acc2 would reach the next
                # group still pending, and _mma_group takes its layout from a waited one
                for wait_group in ((True, False) if bn2 == 0 else (True, )):
                    def run(o=out, b=bn, b2=bn2, r=rep, w=wait_group):
                        launch(a, o, args.steps, b, b2, r, w)
                    run()
                    ms = rl.median_ms(run)
                    tf = flops(out.numel(), args.steps, bn, bn2, rep) / ms / 1e9
                    print(f"| {bn} + {bn2} | {rep} | {'group' if wait_group else 'step'} | "
                          f"{per_sm} | {ms:.3f} | {tf:.0f} | {tf * 1e12 / bf16:.2f} |",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
