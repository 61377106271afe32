"""The 4K prefill's memory-bound kernels ("the rest" of bench/prefill.py's families) alone, at
the slice plan's shapes, under several launch configs: time, bytes moved and the fraction of
the HBM copy ceiling measured in the same run.

    TRITON_INTERPRET=0 python bench/rest_kernels.py [--tokens 4096] [--kernels ...] [--ncu]
    python bench/rest_kernels.py --smoke                # CPU interpreter, small shapes

Kernels (each a call of the engine's own wrapper, the launch config set through its module's
constants; ``default`` is the module's):

  expand_norm  ``mhc_norm.hc_expand_norm(quant=True)``: ``_hc_expand_collapse_kernel`` +
               ``_rms_apply_kernel`` (x, out read; y, h, hq written) — BLOCK_D:WARPS
  rms_apply    ``mhc_norm.rms_apply`` alone (h read and written, hq written) — its own tile:
               APPLY_BLOCK_D:APPLY_WARPS
  gather       ``moe_gluon_w4a16_prefill.gather_tokens`` (x rows read, slot rows written) —
               SLOTS:BLOCK_K:WARPS
  swiglu       ``moe_swiglu.swiglu_fake_q8_slots`` (g, u read; slot rows written) — BP:BN:WARPS
  combine      ``moe_experts.combine_pairs(residual=)`` (per-pair rows and the shared expert's
               read; token rows written) — BLOCK_D:WARPS
  coeffs       ``mhc.hc_coeffs`` (the streams read once; fn from L2), its default launch only
               (bench/mhc_prefill.py sweeps its configs)

Shapes of the 4K prefill on the slice plan: N tokens, S = 4 streams of D = 5120 (bf16), I =
2304, 384 experts, top-6 (pairs grouped in blocks of 128, the engine's BLOCK_M at 4K). Per
(kernel, variant): median µs a call (CUDA events around 10 back-to-back calls, 20 runs after 3
warm-ups), the bytes the kernel must move (each operand once), GB/s, the fraction of the copy
ceiling, and max |out - out of the default| over its outputs (0: the same bits; expand_norm's
statistic sums in BLOCK_D chunks, so other BLOCK_Ds may differ in the last bits). ``--ncu``:
instead, each kernel's default once between cudaProfilerStart / Stop (run under ``ncu
--profile-from-start off``).
``--pick LOG``: from a sweep's printed table, the ``kernel_overrides.py --launch-constant``
flags of each kernel's fastest variant (the defaults' own values where none is faster by
``--pick-margin``), on one line; and, with ``--pick-defaults``, the defaults' values of the
same constants (the A/B control of ``prefill_ab.py``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_args  # noqa: E402

STREAMS, DIM, INTER, EXPERTS, TOPK, BLOCK_M = 4, 5120, 2304, 384, 6, 128
VARIANTS = {
    "expand_norm": ("default", "512:2", "1024:4", "1024:8", "256:2", "2048:8"),
    "rms_apply": ("default", "512:4", "512:2", "1024:8", "2048:8", "256:2"),
    "gather": ("default", "4:512:4", "16:512:4", "8:1024:4", "8:512:8", "16:1024:8", "2:2048:4"),
    "swiglu": ("default", "16:256:4", "32:128:4", "8:256:4", "16:128:8", "32:256:8", "8:512:4"),
    "combine": ("default", "512:4", "1024:4", "2048:8", "512:2", "2048:4"),
    "coeffs": ("default",),  # its launch configs: bench/mhc_prefill.py
}
# module constants each kernel's variant fields set, in order
CONSTANTS = {
    "expand_norm": ("mhc_norm", ("BLOCK_D", "NUM_WARPS")),
    "rms_apply": ("mhc_norm", ("APPLY_BLOCK_D", "APPLY_WARPS")),
    "gather": ("moe_gluon_w4a16_prefill", ("GATHER_SLOTS", "GATHER_BLOCK_K", "GATHER_WARPS")),
    "swiglu": ("moe_swiglu", ("SLOTS_BLOCK_P", "SLOTS_BLOCK_N", "SLOTS_WARPS")),
    "combine": ("moe_experts", ("COMBINE_BLOCK_D", "COMBINE_WARPS")),
    "coeffs": ("mhc", ()),
}


def module(name: str):
    return importlib.import_module(f"deepinfer.kernels.triton.{name}")


def set_variant(kernel: str, variant: str, defaults: dict) -> None:
    mod_name, names = CONSTANTS[kernel]
    sweep_args.set_int_constants(module(mod_name), defaults[kernel], names, variant, kernel)


def make_calls(num_tokens: int, dim: int, inter: int, experts: int, device: str) -> dict:
    """kernel -> (timed call, bytes it must move, checked call or None: the timed one); a call
    returns its outputs as a tuple."""
    from deepinfer.kernels.triton import mhc, mhc_norm, moe_align, moe_experts, moe_swiglu
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf16

    g = torch.Generator(device="cpu").manual_seed(0)

    def randn(*shape, dtype=torch.bfloat16, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)

    n, s, p = num_tokens, STREAMS, num_tokens * TOPK
    bf2 = 2  # bytes per bf16
    x, out = randn(n, s, dim), randn(n, dim)
    post, pre = torch.rand(n, s, generator=g).to(device), torch.rand(n, s, generator=g).to(device)
    comb = torch.rand(n, s, s, generator=g).to(device)
    weight = randn(dim, scale=0.1) + 1
    h, hq = randn(n, dim), torch.empty(n, dim, dtype=torch.bfloat16, device=device)
    ids = torch.rand(n, experts, generator=g).topk(TOPK, dim=1).indices.to(device)
    route_w = torch.rand(n, TOPK, generator=g).to(device)
    pairs, _ = moe_align.align_pairs(ids, experts, BLOCK_M)
    xq = randn(n, dim)
    gate, up = randn(p, inter), randn(p, inter)
    y, res = randn(p, dim), randn(n, dim)
    fn = randn((2 + s) * s, s * dim, dtype=torch.float32, scale=0.01)
    fn_scale = torch.tensor([0.5, 0.7, 1.3], device=device)
    fn_base = randn((2 + s) * s, dtype=torch.float32, scale=0.3)

    h_work = h.clone()
    ws_by_block: dict[int, torch.Tensor] = {}
    gathered = torch.zeros(pairs.numel(), dim, dtype=torch.bfloat16, device=device)
    h_slots = torch.zeros(pairs.numel(), inter, dtype=torch.bfloat16, device=device)

    def rms_apply(fresh: bool = False):
        """In place on h_work (fresh: from h first), from the expand's chunk sums (those of a
        row of ones)."""
        block_d = min(mhc_norm.BLOCK_D, dim)
        ws = ws_by_block.setdefault(block_d, torch.full((n, dim // block_d), float(block_d),
                                                        device=device))
        if fresh:
            h_work.copy_(h)
        mhc_norm.rms_apply(h_work, weight, ws, 1e-6, hq)
        return h_work, hq

    # padding slots are left unwritten: the gather and SwiGLU write into zeroed buffers
    return {
        "expand_norm": (lambda: mhc_norm.hc_expand_norm(out, x, post, comb, pre, weight, 1e-6,
                                                       quant=True),
                        n * dim * bf2 * (2 * s + 2 + 3), None),  # x, out; y, h; h again, hq
        "rms_apply": (rms_apply, 3 * n * dim * bf2, lambda: rms_apply(fresh=True)),
        "gather": (lambda: (pf16.gather_tokens(xq, pairs, p, TOPK, out=gathered),),
                   (n + p) * dim * bf2, None),
        "swiglu": (lambda: (moe_swiglu.swiglu_fake_q8_slots(gate, up, route_w, 10.0,
                                                            torch.bfloat16, pairs, p,
                                                            out=h_slots),),
                   3 * p * inter * bf2, None),
        "combine": (lambda: (moe_experts.combine_pairs(y, ids, residual=res),),
                    (p + 2 * n) * dim * bf2, None),
        "coeffs": (lambda: mhc.hc_coeffs(x, fn, fn_scale, fn_base, 1e-20, 1e-6, 20),
                   n * s * dim * bf2, None),
    }


def max_diff(a: tuple, b: tuple) -> float:
    worst = 0.0
    for u, v in zip(a, b, strict=True):
        if u is None:
            continue
        d = (u.float() - v.float()).abs()
        worst = max(worst, d.max().item())
    return worst


def median_us(fn, device: str, runs: int = 20, calls: int = 10) -> float:
    """Median over ``runs`` of the mean µs a call of ``calls`` back-to-back calls between two
    events (``roofline.median_ms``): the GPU's queue stays ahead of the host, so the wrappers'
    launch cost (tens of µs a Triton launch from Python) is not timed — round 185 timed one
    call between events, which counted it (the same kernels 20-95 % slower than Nsight
    Compute's durations). NaN on the CPU (one call: the smoke)."""
    if device == "cpu":
        fn()
        return float("nan")
    from roofline import median_ms

    return median_ms(fn, runs, calls) * 1e3


def copy_ceiling_gbs(device: str) -> float:
    """``roofline.copy_ms`` of 1 GiB as bytes read + written per second (GB/s); NaN on CPU."""
    if device == "cpu":
        return float("nan")
    from roofline import copy_ms

    return 2 * (1 << 30) / copy_ms(1 << 30) / 1e6


def pick(log: str, margin: float, defaults_only: bool) -> str:
    """``--launch-constant`` flags: per kernel of the sweep's table in ``log``, the fastest
    variant's constants when it beats ``default`` by more than ``margin`` (a fraction), else
    the defaults' values (every kernel's constants are named either way)."""
    best: dict[str, tuple[float, str]] = {}
    default_us: dict[str, float] = {}
    try:
        lines = Path(log).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise SystemExit(f"rest_kernels --pick {log}: cannot read the sweep log "
                         f"({e.strerror})") from None
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] == "coeffs" or cells[0] not in VARIANTS:
            continue
        try:
            us = float(cells[2])
        except ValueError:  # a failed row
            continue
        if cells[1] == "default":
            default_us[cells[0]] = us
        if cells[0] not in best or us < best[cells[0]][0]:
            best[cells[0]] = (us, cells[1])
    flags = []
    for kernel, (us, variant) in best.items():
        mod_name, names = CONSTANTS[kernel]
        mod = module(mod_name)
        values = [getattr(mod, name) for name in names]
        if (not defaults_only and variant != "default" and kernel in default_us
                and us < default_us[kernel] * (1 - margin)):
            values = [int(f) for f in variant.split(":")]
        flags += [f"--launch-constant {mod_name}.{name}={value}"
                  for name, value in zip(names, values, strict=True)]
    return " ".join(flags)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--kernels", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, 32 tokens, D = 256")
    ap.add_argument("--ncu", action="store_true",
                    help="each kernel's default once between cudaProfilerStart / Stop")
    ap.add_argument("--only-default", action="store_true",
                    help="each kernel's default launch only (an A/B of two trees)")
    ap.add_argument("--pick", default=None, metavar="LOG",
                    help="print the fastest variants' --launch-constant flags from a sweep log")
    ap.add_argument("--pick-margin", type=float, default=0.03)
    ap.add_argument("--pick-defaults", action="store_true")
    args = ap.parse_args()
    if args.pick:
        print(pick(args.pick, args.pick_margin, args.pick_defaults))
        return 0
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    device = "cpu" if args.smoke else "cuda"
    dims = (32, 256, 256, 16) if args.smoke else (args.tokens, DIM, INTER, EXPERTS)
    calls = make_calls(*dims, device)
    defaults = {k: {name: getattr(module(m), name) for name in names}
                for k, (m, names) in CONSTANTS.items()}
    if args.ncu:
        for kernel in args.kernels:
            calls[kernel][0]()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for kernel in args.kernels:
            calls[kernel][0]()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        print(f"ran {', '.join(args.kernels)} once under the profiler")
        return 0
    print("kernels:", module("mhc_norm").__file__)  # which tree (an A/B sets PYTHONPATH)
    ceiling = copy_ceiling_gbs(device)
    print(f"tokens {dims[0]}, D {dims[1]}, I {dims[2]}, experts {dims[3]}; copy ceiling "
          f"{ceiling:.0f} GB/s")
    print("| kernel | variant | µs | MB | GB/s | of copy | max diff vs default |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for kernel in args.kernels:
        fn, nbytes, check = calls[kernel]
        check = check or fn
        set_variant(kernel, "default", defaults)
        ref = tuple(t.clone() if t is not None else None for t in check())
        for variant in VARIANTS[kernel][:1] if args.only_default else VARIANTS[kernel]:
            def measure(kernel=kernel, variant=variant, fn=fn, check=check, ref=ref):
                set_variant(kernel, variant, defaults)
                return max_diff(check(), ref), median_us(fn, device)

            # a config that does not compile is a failed row, not the end of the sweep
            measured = sweep_args.try_variant(f"{kernel} | {variant}", measure)
            if measured is None:
                continue
            diff, us = measured
            gbs = nbytes / us / 1e3
            print(f"| {kernel} | {variant} | {us:.1f} | {nbytes / 1e6:.0f} | {gbs:.0f} | "
                  f"{gbs / ceiling:.2f} | {diff:.3g} |", flush=True)
        set_variant(kernel, "default", defaults)
    return 0


if __name__ == "__main__":
    sys.exit(main())
