"""mHC coefficients (kernels/triton/mhc.py ``hc_coeffs``) at prefill and decode sizes under several
launch configs.

    TRITON_INTERPRET=0 python bench/mhc_prefill.py [--tokens 4096 64] [--variants ...]
    python bench/mhc_prefill.py --smoke                                     # CPU interpreter

Shapes of the slice plan: S = 4 streams of D = 5120 (bf16), fn (24, 20480) fp32, 20 Sinkhorn
iterations. A variant is ``BM:BK:WARPS:STAGES:TARGET`` — the module's ``COEFFS_*`` constants
(tokens per program, K step, warps, stages, the split-K program target). Per (tokens, variant):
the median ms (CUDA events, 20 runs after 3 warm-ups), the split it launched, max |out - out of
the first variant| (split-K reorders fp32 sums), and the fraction of the HBM ceiling measured in
the same run that reading x once (N x S x D x 2 B) takes: the kernel is a stream over x.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_args  # noqa: E402

STREAMS, DIM, ITERS = 4, 5120, 20
DEFAULT_VARIANTS = "16:64:4:4:264,16:64:4:4:528,16:64:4:4:1056,16:64:4:4:2112,16:32:4:4:1056"


def set_variant(mhc, bm: int, bk: int, warps: int, stages: int, target: int) -> None:
    mhc.COEFFS_BLOCK_M, mhc.COEFFS_BLOCK_K = bm, bk
    mhc.COEFFS_NUM_WARPS, mhc.COEFFS_NUM_STAGES, mhc.COEFFS_TARGET_PROGRAMS = warps, stages, target


def main() -> int:
    args = sweep_args.parse(__doc__, DEFAULT_VARIANTS, "20 tokens, D=64",
                            lambda ap: ap.add_argument("--tokens", type=int, nargs="+",
                                                       default=[4096, 64]))
    from deepinfer.kernels.reference import mhc as ref
    from deepinfer.kernels.triton import mhc

    device = args.device
    dim = 64 if args.smoke else DIM
    token_counts = [20] if args.smoke else args.tokens
    g = torch.Generator(device="cpu").manual_seed(0)
    fn = (torch.randn((2 + STREAMS) * STREAMS, STREAMS * dim, generator=g) * 0.01).to(device)
    scale = torch.tensor([0.5, 0.7, 1.3], device=device)
    base = (torch.randn((2 + STREAMS) * STREAMS, generator=g) * 0.3).to(device)
    if not args.smoke:
        from roofline import measure_ceilings, median_ms

        hbm = measure_ceilings()["hbm_bytes_per_s"]
        print(f"{torch.cuda.get_device_name()}: HBM ceiling {hbm / 1e12:.2f} TB/s; S={STREAMS} "
              f"D={dim}")
        print("| tokens | variant | ms | split | of the x-read time | max abs diff vs first |")
        print("|---:|---|---:|---:|---:|---:|")
    for n in token_counts:
        x = torch.randn(n, STREAMS, dim, generator=g).to(torch.bfloat16).to(device)
        args_ = (x, fn, scale, base, 1e-20, 1e-6, ITERS)
        want = ref.hc_coeffs(*args_) if args.smoke else None
        first = None
        for variant in args.variants.split(","):
            set_variant(mhc, *map(int, variant.split(":")))
            split = mhc.coeffs_split(n, STREAMS * dim, mhc.coeffs_config(args.smoke))
            run = lambda a=args_: mhc.hc_coeffs(*a)  # noqa: E731
            out = torch.cat([o.reshape(n, -1) for o in run()], 1)
            first = out if first is None else first
            diff = (out - first).abs().max().item()
            if args.smoke:
                err = (out - torch.cat([o.reshape(n, -1) for o in want], 1)).abs().max().item()
                print(f"{variant}: max abs err vs reference {err:.2e}")
                assert err < 1e-4, variant
                continue
            ms = median_ms(run)
            read_ms = x.numel() * 2 / hbm * 1e3
            print(f"| {n} | {variant} | {ms:.3f} | {split} | {read_ms / ms:.3f} | {diff:.1e} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
