"""The W4A8 Gluon decode expert GEMM (kernels/triton/moe_gluon_w4a8.py) against Triton's, H200.

    TRITON_INTERPRET=0 python bench/moe_gluon_decode.py [--tokens 64 256] [--w4a8-bm 8]

Shapes of the v41-flash-slice plan (D=5120, I=2304, 384 MXFP4 experts, top-6, uniform random
routing, scale bytes 119..122 as bench/moe_decode.py). Per token count:
  * correctness: the Gluon gated (w1, w3: K = D) and down (w2: K = I) GEMMs against
    ``moe_gluon.reference_grouped`` (dequantize + fp32 matmul per expert) on the Q8_32 values of
    the activation (rel. L2);
  * time: median CUDA-event ms of each Gluon launch (and the whole ``run_experts_w4a8``), the
    touched experts' weight bytes over it (GB/s) and η against the HBM copy ceiling measured in
    the same run; ``--w4a8-variants``: the kernel's options side by side;
  * the Triton kernels (``moe_experts.run_experts``, word order, the engine's decode config):
    the gated and down ``_moe_gemm_kernel`` times from the profiler, same inputs.
The bf16 Gluon decode kernel's rows (``moe_gluon.w4_decode_gemm``) were removed in session 42
(measured slower: round 39, gated 0.60-0.63 of HBM against W4A8's 0.70-0.72), code at commit
ad9ad7b.
Prints a table; GPU only (the Gluon kernel has no interpreter path).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_overrides  # noqa: E402
import moe_decode  # noqa: E402  (random weights, routing, bytes: the same as the Triton bench)


def triton_kernel_ms(x, ids, route_w, weights) -> tuple[float, float, float]:
    """(gated ms, down ms, whole run_experts ms) of the Triton path, from the profiler."""
    from bench_common import roofline

    from deepinfer.kernels.triton import moe_experts

    def run():
        return moe_experts.run_experts(x, ids, route_w, *weights, 10.0, mma="bf16")

    whole = roofline().median_ms(run)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            run()
        torch.cuda.synchronize()
    times = [e.device_time for e in prof.events() if "_moe_gemm_kernel" in e.name]
    gated = sorted(times[0::2])[len(times[0::2]) // 2] / 1e3
    down = sorted(times[1::2])[len(times[1::2]) // 2] / 1e3
    return gated, down, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--w4a8-stages", type=int, nargs="*", default=[4],
                        help="TMA ring depths of the W4A8 kernel (moe_gluon_w4a8); none: skip")
    parser.add_argument("--w4a8-bm", type=int, nargs="+", default=[8],
                        help="pairs per program of the W4A8 kernel (8 or 16)")
    parser.add_argument("--w4a8-variants", nargs="+", default=["default"],
                        help="W4A8 kernel variants: 'default' (the module's register_cap), "
                        "GATED_CAP:DOWN_CAP (registers or '-' for none), e.g. -:- 128:96, or "
                        "module=NAME (another copy of the kernel module in kernels/triton)")
    args = parser.parse_args()
    from bench_common import roofline

    from deepinfer.kernels.triton import moe_experts, moe_gluon_w4a8

    rl = roofline()
    hbm = rl.measure_ceilings()["hbm_bytes_per_s"]
    torch.manual_seed(0)
    e, d, i, k = moe_decode.EXPERTS, moe_decode.HIDDEN, moe_decode.INTER, moe_decode.TOPK
    fp4 = moe_decode.random_experts(e, d, i, "cuda")
    words = [moe_experts.mxfp4_to_word_order(w) for w in fp4]
    words8 = [moe_gluon_w4a8.to_kernel_order(w.data) for w in fp4] if args.w4a8_stages else []
    print(f"{torch.cuda.get_device_name()}: HBM ceiling {hbm / 1e12:.2f} TB/s (copy)")
    print("| tokens | kernel | BM | ms | experts | weight MB | GB/s | η | error |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for num_tokens in args.tokens:
        x, ids, route_w = moe_decode.make_inputs(num_tokens, d, e, k, torch.bfloat16, "cuda")
        num_pairs = ids.numel()
        flat = ids.reshape(-1)
        touched = torch.unique(flat).numel()
        h = (torch.randn(num_pairs, i, device="cuda") * 0.5).to(torch.bfloat16)
        gated_bytes = touched * 2 * (fp4[0].data[0].numel() + fp4[0].scale[0].numel())
        down_bytes = touched * (fp4[2].data[0].numel() + fp4[2].scale[0].numel())
        if args.w4a8_stages:
            w4a8_rows(args, rl, hbm, x, h, ids, fp4, words8, num_pairs, flat, touched,
                      gated_bytes, down_bytes)
        g_ms, d_ms, whole = triton_kernel_ms(x, ids, route_w, words)
        for name, ms, n_bytes in (("triton gated", g_ms, gated_bytes),
                                  ("triton down", d_ms, down_bytes)):
            print(f"| {num_tokens} | {name} | 16 | {ms:.3f} | {touched} | {n_bytes / 1e6:.1f} | "
                  f"{n_bytes / ms / 1e6:.0f} | {n_bytes / ms * 1e3 / hbm:.2f} | |", flush=True)
        print(f"| {num_tokens} | triton run_experts (all launches) | | {whole:.3f} | | | | | |")


def w4a8_rows(args, rl, hbm, x, h, ids, fp4, words8, num_pairs, flat, touched, gated_bytes,
              down_bytes) -> None:
    """The W4A8 Gluon kernel (moe_gluon_w4a8) against the reference on the Q8_32 values."""
    from deepinfer.kernels.reference.quant import dequant_fp8_ue8m0
    from deepinfer.kernels.triton import moe_align, moe_gluon, moe_gluon_w4a8, quant_act

    k = moe_decode.TOPK
    xc, xs = quant_act.quant_q8_32(x)
    hc, hs = quant_act.quant_q8_32(h)
    xv, hv = (dequant_fp8_ue8m0(c.view(torch.float8_e4m3fn), e) for c, e in ((xc, xs), (hc, hs)))
    refs = [moe_gluon.reference_grouped(v, w.data.view(torch.uint8), w.scale, flat, div)
            for v, w, div in ((xv, fp4[0], k), (xv, fp4[1], k), (hv, fp4[2], 1))]
    default_cap = moe_gluon_w4a8.register_cap
    for variant, bm, stages in [(v, bm, st) for v in args.w4a8_variants for bm in args.w4a8_bm
                                for st in args.w4a8_stages]:
        kmod = moe_gluon_w4a8
        moe_gluon_w4a8.register_cap = default_cap
        if variant == "default":
            label = f"{stages} stages"
        elif variant.startswith("module="):  # another copy of the kernel module (an A/B)
            try:
                kmod = importlib.import_module(f"deepinfer.kernels.triton.{variant[7:]}")
            except ImportError as e:
                raise SystemExit(f"--w4a8-variants {variant!r}: no module "
                                 f"kernels/triton/{variant[7:]}.py ({e})") from None
            label = f"{stages} stages, {variant[7:]}"
        else:
            kernel_overrides.set_w4a8_decode_variant(variant, "--w4a8-variants")
            label = f"{stages} stages, variant {variant}"
        pairs, blocks = moe_align.align_pairs(ids, moe_decode.EXPERTS, bm)
        gated = functools.partial(kmod.w4a8_decode_gemm, xc, xs, words8[0],
                                  fp4[0].scale, words8[1], fp4[1].scale, pairs, blocks,
                                  num_pairs, k, stages=stages, block_m=bm)
        down = functools.partial(kmod.w4a8_decode_gemm, hc, hs, words8[2],
                                 fp4[2].scale, None, None, pairs, blocks, num_pairs, 1,
                                 stages=stages, block_m=bm)
        o1, o3 = gated()
        if bm == moe_gluon_w4a8.BLOCK_M:  # the whole decode pipeline vs Triton's run_experts
            from deepinfer.kernels.triton import moe_experts
            kw = [moe_experts.ExpertWeights(w.view(torch.int8), f.scale, "mxfp4",
                                            scale_max=f.scale_max)
                  for w, f in zip(words8, fp4, strict=True)]
            rw = torch.rand(ids.shape, device=ids.device)
            whole = rl.median_ms(functools.partial(kmod.run_experts_w4a8, x, ids, rw,
                                                   *kw, 10.0, stages=stages))
            print(f"| {x.shape[0]} | w4a8 run_experts_w4a8 (all launches), {label} | 8 | "
                  f"{whole:.3f} | {touched} | | | | |", flush=True)
        o2, _ = down()
        errs = [((o - r).norm() / r.norm()).item() for o, r in zip((o1, o3, o2), refs,
                                                                  strict=True)]
        for name, fn, n_bytes, err in ((f"w4a8 gated, {label}", gated, gated_bytes,
                                        max(errs[:2])),
                                       (f"w4a8 down, {label}", down, down_bytes,
                                        errs[2])):
            ms = rl.median_ms(fn)
            print(f"| {x.shape[0]} | {name} | {bm} | {ms:.3f} | {touched} | {n_bytes / 1e6:.1f} | "
                  f"{n_bytes / ms / 1e6:.0f} | {n_bytes / ms * 1e3 / hbm:.2f} | "
                  f"{err:.1e} (rel. L2) |", flush=True)


if __name__ == "__main__":
    main()
