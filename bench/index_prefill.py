"""Prefill-shaped indexer scores (kernels/triton/indexer.py, float keys) under several configs.

    TRITON_INTERPRET=0 python bench/index_prefill.py [--queries 4096] [--keys 1024] [--causal 2]
        [--variants ...]
    python bench/index_prefill.py --smoke                                   # CPU interpreter

The slice plan's index-source layer at prefill: N queries x 32 index heads of 128 scored against
one sequence's T unpacked index keys (bf16 rows: ``Indexer.select`` unpacks the 68-B records
once), ``score[n, t] = sum_h w[n, h] * relu(q[n, h] . k[t])``; a 4K prompt at compression
ratio 4 has T = 1,024. A variant is ``m:QUERIES:KEYS:KEY_TILES:WARPS:STAGES`` — the keys-on-M
kernel (``index_scores_keys_m``, session 39) with those module constants; the first default is
the shipped one. The rows kernel's ``h|i:KT:ROWS:WARPS`` variants were removed in session 42
(measured slower: 0.283 -> 0.134 ms), code at commit ad9ad7b. ``--causal RATIO``: each query n
sees (n + 1) // RATIO keys (``num_visible``, as a prompt's layer passes it: about half the
tiles unscored; FLOPs count the visible pairs). Per variant: the median ms (CUDA events, 20
runs after 3 warm-ups), max |out - out of the first variant| (fp32 sums reordered only), FLOPs
2 x N x Hi x D x T and the fraction of the bf16 ceiling measured in the same run. A
measurement for choosing the config, not a test.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_args  # noqa: E402

HEADS, DIM = 32, 128
DEFAULT_VARIANTS = ("m:4:64:16:4:3,m:4:128:8:8:3,m:4:128:8:8:2,m:4:64:8:4:3,m:8:128:8:8:2,"
                    "m:2:128:8:8:3,m:4:128:4:8:3,m:4:128:16:8:3")


def set_variant(layout: str, *nums: int) -> None:
    """``m:QUERIES:KEYS:KT:WARPS:STAGES`` -> the keys-on-M kernel's module constants."""
    from deepinfer.kernels.triton import index_scores_keys_m as keys_m

    if layout != "m":
        raise ValueError(f"variant layout {layout!r}: expected m:QUERIES:KEYS:KT:WARPS:STAGES")
    keys_m.QUERIES, keys_m.KEYS, keys_m.KEY_TILES, keys_m.NUM_WARPS, keys_m.NUM_STAGES = nums


def main() -> int:
    def shapes(ap):
        ap.add_argument("--queries", type=int, default=4096)
        ap.add_argument("--keys", type=int, default=1024)
        ap.add_argument("--causal", type=int, default=0, metavar="RATIO",
                        help="query n sees (n + 1) // RATIO keys")
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
    vis = None
    pairs = n * t
    if args.causal:
        vis = torch.clamp((torch.arange(n) + 1) // args.causal, max=t).to(device)
        pairs = int(vis.sum())
    run = lambda: indexer.index_scores(q, w, keys, vis)  # noqa: E731
    flops = 2 * pairs * HEADS * DIM
    if args.smoke:
        want = ref.index_scores(q, w, keys, vis)
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
        set_variant(layout, *map(int, nums))
        out = sweep_args.try_variant(variant, run)
        if out is None:
            continue
        first = out if first is None else first
        diff = (out - first).nan_to_num(posinf=0, neginf=0).abs().max().item()
        if args.smoke:
            assert torch.equal(torch.isneginf(out), torch.isneginf(want)), variant
            err = (out - want).nan_to_num(posinf=0, neginf=0).abs().max().item()
            print(f"{variant}: max abs err vs reference {err:.2e}, vs first {diff:.2e}")
            assert err < 1e-3, variant
            continue
        ms = median_ms(run)
        print(f"| {variant} | {ms:.3f} | {flops / ms / 1e9:.1f} | {flops / ms * 1e3 / bf16:.3f} "
              f"| {diff:.2e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
