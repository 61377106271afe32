"""Dense FP8-weight GEMMs (kernels/triton/gemm_fp8.py ``gemm_q8``) at a prefill chunk: tilings, and
the weight held as FP8 tiles (one e4m3 dot per 32-K scale block, promoted) or dequantized to bf16
at load (one bf16 dot per BK, no promotion; 2x the dense weight bytes).

    TRITON_INTERPRET=0 python bench/gemm_prefill.py [--rows 4096] [--variants ...]
    python bench/gemm_prefill.py --smoke                                    # CPU interpreter

Shapes: one slice layer's FP8 projections (out, in) — wq_a (1280, 5120), wq_b (32768, 1280), wkv
(512, 5120), wo_b (5120, 8192), indexer wq_b (4096, 1280) — with Q8_32 activations of ``--rows``
rows (what ``linear_quant_act`` feeds the kernel). A variant is ``WEIGHT:BM:BN:BK:GROUP_M:WARPS:
STAGES`` with WEIGHT ``fp8`` or ``bf16``; ``default`` is ``gemm_config``'s choice for FP8. Per
variant: the summed median ms over the shapes (CUDA events, 20 runs after 3 warm-ups), TFLOP/s,
the fraction of the fp8 (fp8 weights) or bf16 ceiling measured in the same run, and the largest
relative error against the first variant (both weight forms hold the same values exactly: only
fp32 summation order differs).
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_args  # noqa: E402

SHAPES = ((1280, 5120), (32768, 1280), (512, 5120), (5120, 8192), (4096, 1280))
DEFAULT_VARIANTS = ("default,fp8:128:128:64:8:8:4,fp8:128:256:32:8:8:4,fp8:64:128:32:8:4:6,"
                    "bf16:128:128:64:8:8:4,bf16:128:128:128:8:8:3,bf16:128:256:64:8:8:3,"
                    "bf16:64:128:64:8:4:4")


def parse(variant: str) -> tuple[str, dict | None]:
    if variant == "default":
        return "fp8", None
    weight, *nums = variant.split(":")
    bm, bn, bk, group_m, warps, stages = map(int, nums)
    return weight, dict(BM=bm, BN=bn, BK=bk, GROUP_M=group_m, num_warps=warps,
                        num_stages=stages)


def main() -> int:
    args = sweep_args.parse(__doc__, DEFAULT_VARIANTS, "small shapes",
                            lambda ap: ap.add_argument("--rows", type=int, default=4096))
    from deepinfer.kernels.formats import dequantize_fp8_weight, quantize_fp8_weight
    from deepinfer.kernels.quantized import Fp8BlockWeight
    from deepinfer.kernels.triton import gemm_fp8, quant_act

    device = args.device
    rows, shapes = (40, ((96, 128), (64, 96))) if args.smoke else (args.rows, SHAPES)
    g = torch.Generator(device="cpu").manual_seed(0)
    cases = []
    for out_f, in_f in shapes:
        codes, scale = quantize_fp8_weight(torch.randn(out_f, in_f, generator=g) * 0.02)
        fp8 = Fp8BlockWeight(codes.to(device), scale.view(torch.uint8).to(device))
        bf16 = dequantize_fp8_weight(codes, scale).to(torch.bfloat16).to(device)
        x = torch.randn(rows, in_f, generator=g).to(torch.bfloat16).to(device)
        a_codes, a_scale = quant_act.quant_q8_32(x)
        cases.append((fp8, bf16, a_codes, a_scale))
    flops = sum(2 * rows * o * i for o, i in shapes)
    if not args.smoke:
        from roofline import measure_ceilings, median_ms

        ceil = measure_ceilings()
        print(f"{torch.cuda.get_device_name()}: fp8 {ceil['fp8_flops_per_s'] / 1e12:.0f}, bf16 "
              f"{ceil['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s; {rows} rows, shapes {SHAPES}")
        print("| variant | ms (all shapes) | TFLOP/s | of its ceiling | max rel err vs first |")
        print("|---|---:|---:|---:|---:|")
    base_config, first = gemm_fp8.gemm_config, None
    for variant in args.variants.split(","):
        weight, cfg = parse(variant)
        gemm_fp8.gemm_config = (base_config if cfg is None or args.smoke
                                else (lambda *a, cfg=cfg, **k: dict(cfg)))
        runs = [lambda c=c, w=weight: gemm_fp8.gemm_q8(c[2], c[3], c[0] if w == "fp8" else c[1],
                                                       torch.bfloat16) for c in cases]
        try:
            outs = [run().float() for run in runs]
        except Exception as e:  # a tiling that does not compile (registers, shared memory)
            print(f"| {variant} | failed: {type(e).__name__}: {str(e).splitlines()[0][:100]} |",
                  flush=True)
            continue
        first = outs if first is None else first
        rel = max(((o - f).norm() / f.norm()).item() for o, f in zip(outs, first, strict=True))
        if args.smoke:
            print(f"{variant}: max rel err vs first {rel:.1e}")
            assert rel < 1e-2, variant  # bf16 outputs: ~2^-9 relative
            continue
        ms = sum(median_ms(run) for run in runs)
        rate = ceil["fp8_flops_per_s" if weight == "fp8" else "bf16_flops_per_s"]
        print(f"| {variant} | {ms:.3f} | {flops / ms / 1e9:.1f} | {flops / ms * 1e3 / rate:.3f} "
              f"| {rel:.1e} |", flush=True)
    gemm_fp8.gemm_config = base_config
    return 0


if __name__ == "__main__":
    sys.exit(main())
