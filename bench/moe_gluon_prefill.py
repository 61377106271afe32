"""The bf16 Gluon prefill expert GEMM (kernels/triton/moe_gluon_w4a16_prefill.py), on the H200.

    TRITON_INTERPRET=0 python bench/moe_gluon_prefill.py [--tokens 4096 16384] [--w4a16-bm 64 128]

MXFP4 weights in the W4A8 order decoded to bf16 (no per-group promotion), against the Triton
tiles. Shapes of the v41-flash-slice plan (D=5120, I=2304, 384 MXFP4 experts, top-6, uniform random
routing, scale bytes 119..122 as bench/moe_decode.py). Per token count:
  * correctness: each GEMM against ``moe_gluon.reference_grouped`` on the Q8_32 values
    (rel. L2), and the whole pipeline (``run_experts_w4a16_prefill``) against Triton's
    ``run_experts`` on the same weights (rel. L2);
  * time: median CUDA-event ms of each GEMM launch, its FLOPs (2 * pairs * O * K, padding not
    counted) over it against the FP8 and bf16 matmul ceilings measured in the same run, and the
    weight bytes over it against the HBM ceiling; the whole pipeline against Triton's
    run_experts (word order, the engine's prefill config) and its two ``_moe_gemm_kernel``
    launches.
``--w4a16-bm`` / ``--w4a16-stages`` / ``--w4a16-wg`` / ``--w4a16-parts``: the configs;
``--w4a16-rep 1 2``: also with two A fragments per warpgroup (128 rows on one warpgroup), each
config's output compared bit for bit with its BM's first; ``--w4a16-kernel base ws``: the
kernels (``ws``: ``moe_gluon_w4a16_prefill_ws``, the TMA issue on a producer warp), each with an
optional launch register cap (``ws:128``), the pipeline rows on each as well.
``--graphs`` (decode sizes, e.g. ``--tokens 64 256 --w4a16-bm 64``): the whole pipelines are
timed as CUDA graphs (µs per call of 10 back-to-back calls: no launch latency, as the decode
step replays them), and the decode pipeline (``moe_gluon_w4a8.run_experts_w4a8``) is printed
beside them, with whether each pipeline's output is bit-identical to the decode pipeline's.
The FP8 (W4A8) prefill kernel's rows (``moe_gluon_w4a8_prefill``) were removed in session 42
(measured slower: H200 round 71a, 8.18 vs 11.21 ms at 4K tokens), code at commit ad9ad7b.
Prints a table; GPU only (Gluon has no interpreter path).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_decode  # noqa: E402  (random weights, routing: the same as the Triton bench)
from moe_gluon_decode import triton_kernel_ms  # noqa: E402


def gemm_row(rl, run, out, ref, w, f, touched: int, fp8: float, bf16: float | None,
             label: str) -> str:
    """Run one expert GEMM launch, check ``out`` against ``ref`` (rel. L2) and time it: a table
    row ``| label | ms | TFLOP/s | of FP8 [(of bf16)] | weight GB/s | rel. L2 |``. FLOPs count
    the real pairs only (out's rows); bytes: the touched experts' weights and scales. ``out``
    is NaN-filled before the checked run (a row the launch misses cannot pass on stale values)."""
    out.fill_(float("nan"))
    run()
    err = ((out - ref).norm() / ref.norm()).item()
    ms = rl.median_ms(run)
    flops = 2 * out.shape[0] * w.shape[1] * w.shape[2] * 2
    n_bytes = touched * (w[0].numel() + f.scale[0].numel())
    share = f"{flops / ms * 1e3 / fp8:.2f}"
    if bf16:
        share += f" (of bf16 {flops / ms * 1e3 / bf16:.2f})"
    return (f"| {label} | {ms:.3f} | {flops / ms / 1e9:.0f} | {share} | "
            f"{n_bytes / ms / 1e6:.0f} | {err:.1e} |")


def pipeline_row(rl, fn, ref, graphs: bool, label: str) -> str:
    """Run a whole expert pipeline, check it against ``ref`` (rel. L2) and time it (CUDA
    graphs of 10 calls with ``graphs``, else the median launch): a table row."""
    out = fn()
    err = ((out - ref).norm() / ref.norm()).item()
    ms = rl.graph_us(fn, 10) / 1e3 if graphs else rl.median_ms(fn)
    return f"| {label} | {ms:.3f} | | | | {err:.1e} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096])
    parser.add_argument("--w4a16-bm", type=int, nargs="*", default=[64, 128],
                        help="pairs per program of the bf16 prefill kernel (none: skip it)")
    parser.add_argument("--w4a16-stages", type=int, nargs="+", default=[3])
    parser.add_argument("--w4a16-wg", type=int, nargs="+", default=[2],
                        help="warpgroups per program of the bf16 prefill kernel (1 or 2)")
    parser.add_argument("--w4a16-rep", type=int, nargs="+", default=[1],
                        help="A fragments per warpgroup and group (64 rep weight rows each)")
    parser.add_argument("--w4a16-kernel", nargs="+", default=["base"],
                        help="base or ws (the TMA issue on a producer warp; ROW_STORES 0) or "
                             "wsr (ws with ROW_STORES 1: 16-byte output stores), "
                             "each with an optional launch register cap per thread (base:168, "
                             "ws:128)")
    parser.add_argument("--w4a16-parts", type=int, nargs="+", default=[2],
                        help="a block's N in parts of BM: 1, 2 (halves), 4 (quarters) or 8 "
                             "(eighths, from BM 128)")
    parser.add_argument("--probe-no-decode", action="store_true",
                        help="a timing probe: the bf16 kernel without its integer decode (the "
                             "weight words scaled as they are: wrong values, rel. L2 ~1)")
    parser.add_argument("--l2-experts", type=int, nargs="*", default=[],
                        help="also time each bf16 GEMM (on its row's kernel) with its blocks "
                             "remapped onto N experts (block expert e -> e %% N: the same "
                             "blocks and token tiles, the "
                             "weights L2-resident: what HBM weight streaming costs; wrong "
                             "values, a timing probe)")
    parser.add_argument("--skip-triton", action="store_true",
                        help="skip the Triton run_experts rows")
    parser.add_argument("--graphs", action="store_true",
                        help="time the whole pipelines as CUDA graphs and print the decode "
                             "pipeline beside them (decode sizes)")
    args = parser.parse_args()
    for kern in args.w4a16_kernel:
        name, _, cap = kern.partition(":")
        if name not in ("base", "ws", "wsr") or (cap and not cap.isdigit()):
            parser.error(f"--w4a16-kernel {kern}: expected base, ws or wsr, optionally "
                         ":REGISTERS")
    from bench_common import roofline

    from deepinfer.kernels.reference.quant import dequant_fp8_ue8m0
    from deepinfer.kernels.triton import (
        moe_align,
        moe_experts,
        moe_gluon,
        moe_gluon_w4a8,
        quant_act,
    )
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf16
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as pf16_ws

    if args.probe_no_decode:  # before any compile (moe_gluon_w4a16_prefill._NO_DECODE)
        from triton.experimental.gluon import language as gl
        pf16._NO_DECODE = gl.constexpr(True)
        print("PROBE: the bf16 kernel without its integer decode (wrong values)")
    rl = roofline()
    ceil = rl.measure_ceilings()
    hbm, fp8 = ceil["hbm_bytes_per_s"], ceil["fp8_flops_per_s"]
    bf16 = ceil["bf16_flops_per_s"]
    torch.manual_seed(0)
    e, d, i, k = moe_decode.EXPERTS, moe_decode.HIDDEN, moe_decode.INTER, moe_decode.TOPK
    fp4 = moe_decode.random_experts(e, d, i, "cuda")
    words = [moe_experts.mxfp4_to_word_order(w) for w in fp4]
    order = [moe_gluon_w4a8.to_kernel_order(w.data) for w in fp4]
    kw = [moe_experts.ExpertWeights(w.view(torch.int8), f.scale, "mxfp4", scale_max=f.scale_max)
          for w, f in zip(order, fp4, strict=True)]
    print(f"{torch.cuda.get_device_name()}: HBM {hbm / 1e12:.2f} TB/s (copy), FP8 matmul "
          f"{fp8 / 1e12:.0f} TFLOP/s (torch._scaled_mm 8192^3), bf16 {bf16 / 1e12:.0f}")
    print("| tokens | kernel | BM | stages | WG | ms | TFLOP/s | of FP8 | weight GB/s | rel. L2 |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for num_tokens in args.tokens:
        x, ids, route_w = moe_decode.make_inputs(num_tokens, d, e, k, torch.bfloat16, "cuda")
        num_pairs = ids.numel()
        flat = ids.reshape(-1)
        touched = torch.unique(flat).numel()
        h = (torch.randn(num_pairs, i, device="cuda") * 0.5).to(torch.bfloat16)
        xc, xs = quant_act.quant_q8_32(x)
        hc, hs = quant_act.quant_q8_32(h)
        xv, hv = (dequant_fp8_ue8m0(c.view(torch.float8_e4m3fn), s)
                  for c, s in ((xc, xs), (hc, hs)))
        cases = [("gated w1", xc, xs, k, order[0], fp4[0], xv), ("down w2", hc, hs, 1, order[2],
                                                                  fp4[2], hv)]
        refs = [moe_gluon.reference_grouped(v, f.data.view(torch.uint8), f.scale, flat, div)
                for _, _, _, div, _, f, v in cases]
        ref_whole = moe_experts.run_experts(x, ids, route_w, *words, 10.0, mma="bf16")
        outs = {}  # each pipeline's output, for the bit comparison with the decode pipeline
        firsts = {}  # (GEMM, BM) -> the first config's output, to compare the others' bits with
        default_kernel = pf16.KERNEL, pf16.MAXNREG, pf16_ws.ROW_STORES  # restored after
        for bm, stages, wg, parts, rep, kern in [
                (bm, st, wg, pt, rp, kn) for bm in args.w4a16_bm for st in args.w4a16_stages
                for wg in args.w4a16_wg for pt in args.w4a16_parts for rp in args.w4a16_rep
                for kn in args.w4a16_kernel if wg * rp <= (4 if kn.startswith("ws") else 2)]:
            pairs, blocks = moe_align.align_pairs(ids, e, bm)
            name, _, cap = kern.partition(":")  # the pipeline's, too
            pf16.KERNEL, pf16_ws.ROW_STORES = ("ws", 1) if name == "wsr" else (name, 0)
            pf16.MAXNREG = int(cap) if cap else None  # ws: None is launch_regs(wg)
            for (name, _, _, div, w, f, v), ref in zip(cases, refs, strict=True):
                one_mul = f.scale_max is not None and f.scale_max <= 128
                gathered = pf16.gather_tokens(v.to(torch.bfloat16), pairs, num_pairs, div)
                out = torch.empty((num_pairs, w.shape[1]), dtype=torch.float32, device="cuda")
                if pf16.KERNEL == "ws":
                    run = functools.partial(pf16_ws.w4a16_prefill_ws_gemm, gathered, w, f.scale,
                                            pairs, blocks, num_pairs, out, bm, one_mul, wg,
                                            parts, rep, stages, maxnreg=pf16.MAXNREG)
                else:
                    run = functools.partial(pf16.w4a16_prefill_gemm, gathered, w, f.scale,
                                            pairs, blocks, num_pairs, out, bm, stages, one_mul,
                                            wg, parts, rep=rep, maxnreg=pf16.MAXNREG)
                print(gemm_row(rl, run, out, ref, w, f, touched, fp8, bf16,
                               f"{num_tokens} | w4a16 {name} parts{parts} rep{rep} {kern} | "
                               f"{bm} | {stages} | {wg}"), flush=True)
                if (name, bm) in firsts:
                    same = torch.equal(out, firsts[(name, bm)])
                    print(f"{num_tokens} tokens: {name} BM {bm} parts{parts} rep{rep} WG {wg} "
                          f"{kern} bit-identical to this BM's first config: {same}", flush=True)
                else:
                    firsts[(name, bm)] = out.clone()
                for n_l2 in args.l2_experts:  # the same launch, weights of n_l2 experts only
                    remapped = torch.where(blocks >= 0, blocks % n_l2, blocks)
                    probe = functools.partial(run.func, *run.args[:4], remapped,
                                              *run.args[5:], **run.keywords)
                    probe()
                    print(f"| {num_tokens} | w4a16 {name} parts{parts}, weights of {n_l2} "
                          f"experts (L2 probe) | {bm} | {stages} | {wg} | "
                          f"{rl.median_ms(probe):.3f} | | | | probe |", flush=True)
            whole_fn = functools.partial(pf16.run_experts_w4a16_prefill, x, ids, route_w, *kw,
                                         10.0, stages=stages, block_m=bm, warpgroups=wg,
                                         parts=parts, rep=rep)
            outs[f"w4a16 BM {bm} parts {parts} rep {rep} {kern}"] = whole_fn()
            print(pipeline_row(rl, whole_fn, ref_whole, args.graphs,
                               f"{num_tokens} | w4a16 run_experts_w4a16_prefill"
                               f" parts{parts} rep{rep} {kern} (all launches) | {bm} | "
                               f"{stages} | {wg}"), flush=True)
        pf16.KERNEL, pf16.MAXNREG, pf16_ws.ROW_STORES = default_kernel
        if args.graphs:
            dec_fn = functools.partial(moe_gluon_w4a8.run_experts_w4a8, x, ids, route_w, *kw,
                                       10.0)
            out = dec_fn()
            err = ((out - ref_whole).norm() / ref_whole.norm()).item()
            print(f"| {num_tokens} | w4a8 run_experts_w4a8 (the decode pipeline, all launches) "
                  f"| 8 | 4 | 1 | {rl.graph_us(dec_fn, 10) / 1e3:.3f} | | | | {err:.1e} |",
                  flush=True)
            for label, other in outs.items():
                print(f"{num_tokens} tokens: {label} bit-identical to the decode pipeline: "
                      f"{torch.equal(other, out)}", flush=True)
        if args.skip_triton:
            continue
        g_ms, d_ms, whole = triton_kernel_ms(x, ids, route_w, words)
        print(f"| {num_tokens} | triton gated (w1 + w3) | | | | {g_ms:.3f} | | | | |")
        print(f"| {num_tokens} | triton down | | | | {d_ms:.3f} | | | | |")
        print(f"| {num_tokens} | triton run_experts (all launches) | | | | {whole:.3f} | | | | |",
              flush=True)


if __name__ == "__main__":
    main()
