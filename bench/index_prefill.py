"""Prefill-shaped indexer scores (kernels/triton/indexer.py, float keys) under several configs.

    TRITON_INTERPRET=0 python bench/index_prefill.py [--queries 4096] [--keys 1024] [--variants ...]
    python bench/index_prefill.py --smoke                                   # CPU interpreter

The slice plan's index-source layer at prefill: N queries x 32 index heads of 128 scored against
one sequence's T unpacked index keys (bf16 rows: ``Indexer.select`` unpacks the 68-B records
once), ``score[n, t] = sum_h w[n, h] * relu(q[n, h] . k[t])``; a 4K prompt at compression
ratio 4 has T = 1,024. A variant is ``LAYOUT:KT:ROWS:WARPS`` — LAYOUT ``h`` (contiguous channel
halves) or ``i`` (interleaved pairs, the layout until session 5), key tiles of 128 per program,
q rows per program (queries x heads), warps: the module's ``*_FLOAT`` constants. Per variant: the
median ms (CUDA events, 20 runs after 3 warm-ups), max |out - out of the first variant| (fp32 sums
reordered only), FLOPs 2 x N x Hi x D x T and the fraction of the bf16 ceiling measured in the
same run. A measurement for choosing the config, not a test.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_args  # noqa: E402

HEADS, DIM = 32, 128
DEFAULT_VARIANTS = "i:1:64:4,h:1:64:4,h:4:64:4,h:8:64:4,h:4:64:8,h:4:128:8,h:1:128:8,h:8:128:8"


def set_variant(indexer, layout: str, key_tiles: int, rows: int, warps: int) -> None:
    indexer.FLOAT_HALVES = layout == "h"
    indexer.KEY_TILES_FLOAT, indexer.ROWS_PER_PROGRAM_FLOAT = key_tiles, rows
    indexer.NUM_WARPS_FLOAT = warps


def main() -> int:
    def shapes(ap):
        ap.add_argument("--queries", type=int, default=4096)
        ap.add_argument("--keys", type=int, default=1024)
    args = sweep_args.parse(__doc__, DEFAULT_VARIANTS, "4 queries x 300 keys", shapes)
    from deepinfer.kernels.reference import indexer as ref
    from deepinfer.kernels.triton import indexer

    device = args.device
    n, t = (4, 300) if args.smoke else (args.queries, args.keys)
    g = torch.Generator(device="cpu").manual_seed(0)
    dtype = torch.float32 if args.smoke else torch.bfloat16
    q = torch.randn(n, HEADS, DIM, generator=g).to(dtype).to(device)
    w = torch.randn(n, HEADS, generator=g).to(device)
    keys = torch.randn(t, DIM, generator=g).to(dtype).to(device)
    run = lambda: indexer.index_scores(q, w, keys)  # noqa: E731
    flops = 2 * n * HEADS * DIM * t
    if args.smoke:
        want = ref.index_scores(q, w, keys)
    else:
        from roofline import measure_ceilings, median_ms

        bf16 = measure_ceilings()["bf16_flops_per_s"]
        print(f"{torch.cuda.get_device_name()}: bf16 ceiling {bf16 / 1e12:.0f} TFLOP/s; "
              f"N={n} Hi={HEADS} D={DIM} T={t}")
        print("| variant | ms | TFLOP/s | of bf16 ceiling | max abs diff vs first |")
        print("|---|---:|---:|---:|---:|")
    first = None
    for variant in args.variants.split(","):
        layout, *nums = variant.split(":")
        set_variant(indexer, layout, *map(int, nums))
        out = sweep_args.try_variant(variant, run)
        if out is None:
            continue
        first = out if first is None else first
        diff = (out - first).abs().max().item()
        if args.smoke:
            err = (out - want).abs().max().item()
            print(f"{variant}: max abs err vs reference {err:.2e}, vs first {diff:.2e}")
            assert err < 1e-3, variant
            continue
        ms = median_ms(run)
        print(f"| {variant} | {ms:.3f} | {flops / ms / 1e9:.1f} | {flops / ms * 1e3 / bf16:.3f} "
              f"| {diff:.2e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
