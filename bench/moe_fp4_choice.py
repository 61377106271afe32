"""Which routed-expert path is faster on this GPU: MXFP4 dequantized in the kernel, or MXFP4
re-encoded losslessly to FP8 at load time?

    TRITON_INTERPRET=0 python bench/moe_fp4_choice.py [--tokens 1 64 4096] [--jsonl out.jsonl]

Variants (same result up to fp32 summation order; kernels/triton/moe_experts.py):
  mxfp4_w4a8    FP4 weights (0.5 B/param + scales), nibbles widened to e4m3 in registers, FP8 wgmma
  mxfp4_w4a16   FP4 weights dequantized with their scale to bf16 in registers, bf16 wgmma
  fp8_reencoded e4m3 weights (1 B/param, 2x the memory), no unpacking, FP8 wgmma
Shapes are V4.1-Flash's: hidden 5120, expert intermediate 2304, 384 experts, top-6, bf16
activations; the router is replaced by uniform random top-6 choices (balanced load, as after
EPLB). Prints a table with time, TFLOP/s and effective weight bandwidth per token count, and the
winner per phase (decode <= 256 tokens, prefill above).
"""

from __future__ import annotations

import argparse
import json

import torch

HIDDEN, INTER, EXPERTS, TOPK = 5120, 2304, 384, 6


def _mxfp4(num_experts: int, out_features: int, in_features: int):
    from deepinfer.kernels.triton.moe_experts import ExpertWeights

    data = torch.randint(0, 256, (num_experts, out_features, in_features // 2), dtype=torch.uint8,
                         device="cuda")
    scale = torch.randint(119, 123, (num_experts, out_features, in_features // 32),
                          dtype=torch.uint8, device="cuda")
    return ExpertWeights(data.view(torch.int8), scale, "mxfp4")


def _weight_bytes(ws) -> int:
    return sum(w.data.numel() * w.data.element_size() + w.scale.numel() for w in ws)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 64, 256, 1024, 4096])
    parser.add_argument("--jsonl", default=None, help="append one JSON line per measurement")
    args = parser.parse_args()

    import triton

    from deepinfer.kernels.triton import moe_experts
    from deepinfer.kernels.triton.gemm_fp8 import is_interpreting

    assert torch.cuda.is_available(), "needs a CUDA GPU"
    assert not is_interpreting(), "run with TRITON_INTERPRET=0"
    torch.manual_seed(0)
    fp4 = [_mxfp4(EXPERTS, INTER, HIDDEN), _mxfp4(EXPERTS, INTER, HIDDEN),
           _mxfp4(EXPERTS, HIDDEN, INTER)]
    fp8 = [moe_experts.mxfp4_to_fp8(w) for w in fp4]
    variants = {"mxfp4_w4a8": (fp4, "fp8"), "mxfp4_w4a16": (fp4, "bf16"),
                "fp8_reencoded": (fp8, "fp8")}
    print(f"weights: mxfp4 {_weight_bytes(fp4) / 2**30:.2f} GiB, "
          f"fp8 {_weight_bytes(fp8) / 2**30:.2f} GiB")
    print(f"| {'tokens':>6} | {'variant':<14} | {'time us':>9} | {'TFLOP/s':>8} | "
          f"{'weight GB/s':>11} | {'max|diff| vs w4a8':>17} |")
    best: dict[str, dict[str, float]] = {"decode": {}, "prefill": {}}
    for num_tokens in args.tokens:
        x = torch.randn(num_tokens, HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.5
        ids = torch.rand(num_tokens, EXPERTS, device="cuda").topk(TOPK, dim=1).indices
        weights = torch.rand(num_tokens, TOPK, device="cuda")
        flops = 6.0 * num_tokens * TOPK * HIDDEN * INTER
        used = torch.unique(ids).numel() / EXPERTS  # fraction of experts whose weights are read
        baseline = None
        for name, (ws, mma) in variants.items():
            def fn(x=x, ids=ids, weights=weights, ws=ws, mma=mma):
                return moe_experts.run_experts(x, ids, weights, *ws, 10.0, mma=mma)

            out = fn()
            baseline = out if baseline is None else baseline
            diff = (out - baseline).abs().max().item()
            ms = triton.testing.do_bench(fn, warmup=10, rep=100)
            gbps = _weight_bytes(ws) * used / (ms * 1e-3) / 1e9
            print(f"| {num_tokens:>6} | {name:<14} | {ms * 1e3:>9.1f} | "
                  f"{flops / (ms * 1e-3) / 1e12:>8.1f} | {gbps:>11.0f} | {diff:>17.3e} |")
            phase = "decode" if num_tokens <= 256 else "prefill"
            best[phase][name] = best[phase].get(name, 0.0) + ms
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps({"bench": "moe_fp4_choice", "tokens": num_tokens,
                                        "variant": name, "ms": ms}) + "\n")
    for phase, times in best.items():
        if times:
            winner = min(times, key=times.get)
            summary = ", ".join(f"{k} {v * 1e3:.0f} us" for k, v in sorted(times.items()))
            print(f"{phase}: fastest = {winner}  (summed over token counts: {summary})")


if __name__ == "__main__":
    main()
