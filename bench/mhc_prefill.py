"""mHC coefficients (kernels/triton/mhc.py ``hc_coeffs``) at prefill and decode sizes under several
launch configs.

    TRITON_INTERPRET=0 python bench/mhc_prefill.py [--tokens 4096 64] [--variants ...]
    python bench/mhc_prefill.py --smoke                                     # CPU interpreter

(The smoke runs every variant with the interpreter's own fp32 launch: it checks the variant
parsing and the reference, not the GPU launches, which tests/kernels/triton compiles for SM90.)

Shapes of the slice plan: S = 4 streams of D = 5120 (bf16), fn (24, 20480) fp32, 20 Sinkhorn
iterations. A variant is ``BM:BK:WARPS:STAGES:TARGET[:PRECISION[:FN_PARTS[:FIXED]]]`` — the
module's ``COEFFS_*`` constants (tokens per program, K step, warps, stages, the split-K program
target, the dot's precision "bf16x3" or "tf32x3", the bf16 terms of fn under bf16x3, the split
from INVARIANT_MIN_ROWS tokens); omitted trailing fields take the module's defaults; a FIXED of 0
splits by the token count at every size (the rule before batch-invariant prefill). Such a variant
pins the launch at every token count (decode and prefill alike); ``default`` is the module's own
launch, which picks BM by the token count (COEFFS_DECODE_MAX_TOKENS). Per (tokens, variant): the
launch it ran (BM, precision/parts), the median ms a call (CUDA events around 10 back-to-back
calls, 20 runs after 3 warm-ups; before session 38 one call, the launch timed with it), the
split it launched, max |out - out of the first variant| (split-K and the precisions reorder fp32
sums), and the fraction of the HBM ceiling measured in the same run that reading x once
(N x S x D x 2 B) takes: the kernel is a stream over x. The default list A/Bs the session-6
launch (tf32x3, BM 16, target 528) against the new default and BM 32 / 128 and FN_PARTS 2
variants.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_args  # noqa: E402

STREAMS, DIM, ITERS = 4, 5120, 20
DEFAULT_VARIANTS = ("16:64:4:4:528:tf32x3,default,32:64:4:4:528:bf16x3:3,"
                    "128:64:8:4:528:bf16x3:3,64:64:4:4:528:bf16x3:2")
# the launch constants a variant sets, in the order of its fields after BM:BK:WARPS:STAGES:TARGET
LAUNCH_CONSTANTS = ("COEFFS_BLOCK_M", "COEFFS_BLOCK_M_PREFILL", "COEFFS_BLOCK_K",
                    "COEFFS_NUM_WARPS", "COEFFS_NUM_WARPS_PREFILL", "COEFFS_NUM_STAGES",
                    "COEFFS_TARGET_PROGRAMS", "COEFFS_PRECISION", "COEFFS_FN_PARTS",
                    "COEFFS_INVARIANT_SPLIT")


def set_variant(mhc, variant: str, defaults: dict) -> None:
    """Restore the module's launch constants (``defaults``), then pin the variant's."""
    for name, value in defaults.items():
        setattr(mhc, name, value)
    if variant == "default":
        return
    fields = variant.split(":")
    assert 5 <= len(fields) <= 8, \
        f"variant {variant!r}: BM:BK:WARPS:STAGES:TARGET[:PREC[:PARTS[:FIXED]]]"
    bm, bk, warps, stages, target = map(int, fields[:5])
    precision = fields[5] if len(fields) > 5 else defaults["COEFFS_PRECISION"]
    parts = int(fields[6]) if len(fields) > 6 else defaults["COEFFS_FN_PARTS"]
    if len(fields) > 7:
        mhc.COEFFS_INVARIANT_SPLIT = int(fields[7])
    assert precision in ("bf16x3", "tf32x3"), f"variant {variant!r}: precision {precision!r}"
    assert parts in (1, 2, 3), f"variant {variant!r}: FN_PARTS {parts}"
    mhc.COEFFS_BLOCK_M = mhc.COEFFS_BLOCK_M_PREFILL = bm
    mhc.COEFFS_NUM_WARPS = mhc.COEFFS_NUM_WARPS_PREFILL = warps
    mhc.COEFFS_BLOCK_K, mhc.COEFFS_NUM_STAGES, mhc.COEFFS_TARGET_PROGRAMS = bk, stages, target
    mhc.COEFFS_PRECISION, mhc.COEFFS_FN_PARTS = precision, parts


def main() -> int:
    args = sweep_args.parse(__doc__, DEFAULT_VARIANTS, "20 tokens, D=64",
                            lambda ap: ap.add_argument("--tokens", type=int, nargs="+",
                                                       default=[4096, 64]))
    from deepinfer.kernels.reference import mhc as ref
    from deepinfer.kernels.triton import mhc

    defaults = {name: getattr(mhc, name) for name in LAUNCH_CONSTANTS}
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
        print("| tokens | variant | launch | ms | split | of the x-read time "
              "| max abs diff vs first |")
        print("|---:|---|---|---:|---:|---:|---:|")
    for n in token_counts:
        x = torch.randn(n, STREAMS, dim, generator=g).to(torch.bfloat16).to(device)
        args_ = (x, fn, scale, base, 1e-20, 1e-6, ITERS)
        want = ref.hc_coeffs(*args_) if args.smoke else None
        first = None
        for variant in args.variants.split(","):
            set_variant(mhc, variant, defaults)
            cfg = mhc.coeffs_config(n, args.smoke)
            launch = f"BM{cfg['BM']} {cfg['precision']}" + (
                f"/{cfg['fn_parts']}" if cfg["precision"] == "bf16x3" else "")
            split = mhc.coeffs_split(n, STREAMS * dim, cfg)
            run = lambda a=args_: mhc.hc_coeffs(*a)  # noqa: E731
            flat = lambda a=args_, n=n: torch.cat([o.reshape(n, -1)  # noqa: E731
                                                   for o in mhc.hc_coeffs(*a)], 1)
            # on the GPU a launch that does not compile is a failed row, in the smoke an error
            out = flat() if args.smoke else sweep_args.try_variant(f"{n} | {variant}", flat)
            if out is None:
                continue
            first = out if first is None else first
            diff = (out - first).abs().max().item()
            if args.smoke:
                err = (out - torch.cat([o.reshape(n, -1) for o in want], 1)).abs().max().item()
                print(f"{variant} ({launch}): max abs err vs reference {err:.2e}")
                assert err < 1e-4, variant
                continue
            ms = median_ms(run, calls=10)  # back to back: the launch not timed
            read_ms = x.numel() * 2 / hbm * 1e3
            print(f"| {n} | {variant} | {launch} | {ms:.3f} | {split} | {read_ms / ms:.3f} "
                  f"| {diff:.1e} |", flush=True)
    set_variant(mhc, "default", defaults)
    return 0


if __name__ == "__main__":
    sys.exit(main())
