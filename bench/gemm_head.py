"""The logit head (bf16-valued x against the bf16 head weight, fp32 logits): tilings of
``linear._linear_kernel`` against the bf16 compute and HBM rooflines.

    TRITON_INTERPRET=0 python bench/gemm_head.py [--rows 64 256] [--variants V,V,...]
    python bench/gemm_head.py --smoke          # CPU interpreter, a small shape (CI)

The engine calls ``linear(y, head.weight, out_dtype=torch.float32)`` with bf16 y (``bf16x``:
the X_SPLIT 1 kernel, one K loop); until session 13 it passed ``y.float()`` (``fp32x``: the
X_SPLIT 3 kernel, whose device flag takes the one-bf16-dot loop of its two). Variant syntax:
``bf16x[:BMxBNxBK:stages:warps]`` or ``fp32x[:BMxBNxBK:stages:warps]`` (``linear_config``'s
tiles, or these). Each variant is timed as a CUDA graph of ``--reps`` launches
(``roofline.graph_us``); the roofline is max(weight bytes / HBM copy rate, 2 M O K / the bf16
matmul rate measured in the same run). Prints µs, TFLOP/s, η and the largest difference to the
fp32x default's output relative to its largest magnitude (fp32 sum order only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

VOCAB, HIDDEN = 129280, 5120  # data/deepseek-v4.1-flash/config.json
DEFAULT_VARIANTS = ("fp32x,bf16x,bf16x:128x128x64:3:8,bf16x:128x256x64:3:8,"
                    "bf16x:128x128x32:4:8,bf16x:128x256x32:4:8,bf16x:64x256x64:4:4,"
                    "bf16x:64x128x64:4:4,bf16x:64x128x128:4:4,bf16x:256x128x64:3:8")


def parse_variant(text: str) -> tuple[bool, dict | None]:
    """``bf16x|fp32x[:BMxBNxBK:stages:warps]`` -> (bf16 x?, a linear_config dict or None)."""
    kind, _, rest = text.partition(":")
    try:
        if kind not in ("bf16x", "fp32x"):
            raise ValueError(kind)
        if not rest:
            return kind == "bf16x", None
        tile, stages, warps = rest.split(":")
        bm, bn, bk = (int(v) for v in tile.split("x"))
    except ValueError:
        sys.exit(f"gemm_head: bad variant {text!r}: expected bf16x or fp32x, optionally "
                 "followed by :BMxBNxBK:stages:warps")
    return kind == "bf16x", dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=int(warps),
                                 num_stages=int(stages))


def run_variant(variant: tuple[bool, dict | None], x: torch.Tensor,
                w: torch.Tensor) -> torch.Tensor:
    """The head's fp32 logits of bf16 x: ``linear(x, w, out_dtype=fp32)`` (bf16x) or
    ``linear(x.float(), w)`` (fp32x), with ``linear_config`` replaced by the variant's tiles
    for that path's X_SPLIT (1 or 3)."""
    from deepinfer.kernels.triton import linear

    bf16_x, cfg = variant
    base = linear.linear_config
    if cfg is not None:
        x_split = 1 if bf16_x else 3
        linear.linear_config = lambda rows, split, w_fp8, interpret=False, out_features=0: (
            cfg if split == x_split else base(rows, split, w_fp8, interpret, out_features))
    try:
        if bf16_x:
            return linear.linear(x, w, out_dtype=torch.float32)
        return linear.linear(x.float(), w)
    finally:
        linear.linear_config = base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--reps", type=int, default=10, help="launches per timed CUDA graph")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, a small shape")
    args = ap.parse_args()
    variants = [(v, parse_variant(v)) for v in args.variants.split(",")]
    if args.smoke:
        torch.manual_seed(0)
        w = torch.randn(96, 64).to(torch.bfloat16)
        x = torch.randn(5, 64).to(torch.bfloat16)
        ref = x.float() @ w.float().t()
        for name in ("fp32x", "bf16x", "bf16x:16x32x32:1:4", "fp32x:16x32x32:1:4"):
            out = run_variant(parse_variant(name), x, w)
            assert out.dtype == torch.float32, (name, out.dtype)
            err = ((out - ref).abs().max() / ref.abs().max()).item()
            print(f"smoke {name}: max rel. difference {err:.1e}")
            if err > 1e-5:
                return 1
        return 0
    from bench_common import roofline

    rl = roofline()
    ceil = rl.measure_ceilings()
    hbm, bf16 = ceil["hbm_bytes_per_s"], ceil["bf16_flops_per_s"]
    print(f"{torch.cuda.get_device_name()}: HBM {hbm / 1e12:.2f} TB/s (copy), bf16 matmul "
          f"{bf16 / 1e12:.0f} TFLOP/s; head {VOCAB} x {HIDDEN}, graphs of {args.reps} launches")
    torch.manual_seed(0)
    w = (torch.randn(VOCAB, HIDDEN, device="cuda") * 0.02).to(torch.bfloat16)
    print("| rows | variant | µs | TFLOP/s | roofline µs | η | max diff / max vs fp32x |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for rows in args.rows:
        x = torch.randn(rows, HIDDEN, device="cuda").to(torch.bfloat16)
        flops = 2.0 * rows * VOCAB * HIDDEN
        floor_us = max(w.numel() * 2 / hbm, flops / bf16) * 1e6
        ref = run_variant((False, None), x, w)
        for name, variant in variants:
            try:
                out = run_variant(variant, x, w)
                us = rl.graph_us(lambda v=variant, x=x: run_variant(v, x, w), args.reps)
            except Exception as exc:  # noqa: BLE001 (a tiling that does not fit: reported)
                print(f"| {rows} | {name} | failed: {type(exc).__name__} | | | | |", flush=True)
                continue
            diff = ((out - ref).abs().max() / ref.abs().max()).item()
            print(f"| {rows} | {name} | {us:.1f} | {flops / us / 1e6:.0f} | {floor_us:.1f} | "
                  f"{floor_us / us:.2f} | {diff:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
