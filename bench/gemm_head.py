"""The logit head (fp32 x against the bf16 head weight, ``linear.linear``'s X_SPLIT 3 path):
tilings of ``linear._linear_kernel`` against the bf16 compute and HBM rooflines.

    TRITON_INTERPRET=0 python bench/gemm_head.py [--rows 64 256] [--variants V,V,...]
    python bench/gemm_head.py --smoke          # CPU interpreter, a small shape (CI)

The engine calls ``linear(y.float(), head.weight)``: x holds bf16 values, so the kernel's
device flag takes the one-bf16-dot loop. Variant syntax: ``default`` (``linear_config``) or
``BMxBNxBK:stages:warps``. Each variant is timed as a CUDA graph of ``--reps`` launches
(``roofline.graph_us``); the roofline is max(weight bytes / HBM copy rate, 2 M O K / the bf16
matmul rate measured in the same run). Prints µs, TFLOP/s, η and the largest difference to the
default's output relative to its largest magnitude.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

VOCAB, HIDDEN = 129280, 5120  # data/deepseek-v4.1-flash/config.json
DEFAULT_VARIANTS = ("default,128x256x64:3:8,128x128x64:4:8,128x128x32:4:8,128x256x32:4:8,"
                    "64x256x64:3:4,128x64x64:4:4,256x128x64:3:8,128x128x128:2:8")


def parse_variant(text: str) -> dict | None:
    """``BMxBNxBK:stages:warps`` -> a linear_config dict; ``default`` -> None."""
    if text == "default":
        return None
    try:
        tile, stages, warps = text.split(":")
        bm, bn, bk = (int(v) for v in tile.split("x"))
    except ValueError:
        sys.exit(f"gemm_head: bad variant {text!r}: expected 'default' or BMxBNxBK:stages:warps")
    return dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=int(warps), num_stages=int(stages))


def run_variant(cfg: dict | None, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``linear.linear(x, w)`` with ``linear_config`` replaced by cfg for fp32 x."""
    from deepinfer.kernels.triton import linear

    if cfg is None:
        return linear.linear(x, w)
    base = linear.linear_config
    linear.linear_config = lambda rows, x_split, w_fp8, interpret=False: (
        cfg if x_split == 3 else base(rows, x_split, w_fp8, interpret))
    try:
        return linear.linear(x, w)
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
        x = torch.randn(5, 64).to(torch.bfloat16).float()
        ref = x @ w.float().t()
        for name, cfg in (("default", None),
                          ("16x32x32:1:4", parse_variant("16x32x32:1:4"))):
            out = run_variant(cfg, x, w)
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
    print("| rows | variant | µs | TFLOP/s | roofline µs | η | max diff / max |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for rows in args.rows:
        x = torch.randn(rows, HIDDEN, device="cuda").to(torch.bfloat16).float()
        flops = 2.0 * rows * VOCAB * HIDDEN
        floor_us = max(w.numel() * 2 / hbm, flops / bf16) * 1e6
        ref = run_variant(None, x, w)
        for name, cfg in variants:
            try:
                out = run_variant(cfg, x, w)
                us = rl.graph_us(lambda cfg=cfg, x=x: run_variant(cfg, x, w), args.reps)
            except Exception as exc:  # noqa: BLE001 (a tiling that does not fit: reported)
                print(f"| {rows} | {name} | failed: {type(exc).__name__} | | | | |", flush=True)
                continue
            diff = ((out - ref).abs().max() / ref.abs().max()).item()
            print(f"| {rows} | {name} | {us:.1f} | {flops / us / 1e6:.0f} | {floor_us:.1f} | "
                  f"{floor_us / us:.2f} | {diff:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
