"""Two small GEMMs of the 4K prefill under their prefill tilings: the router's scores
(``moe_routing.route_sqrtsoftplus``: 4,096 tokens x 5,120 against 384 experts, fp32 logits,
the sqrt-softplus epilogue and the top-k launch) and the compressor's promoted projections
(``linear.linear(x, w, out_dtype=fp32, promoted=True)``: 4,096 x 5,120 against [512, 5,120]
bf16, each 64-column K chunk summed in a fresh fp32 accumulator).

    TRITON_INTERPRET=0 python bench/route_compress.py [--tokens 4096] [--variants ...]
    python bench/route_compress.py --smoke                 # CPU interpreter, small shapes

Variants (comma-separated): ``route:default`` or ``route:BM:BE:BK:WARPS:STAGES`` (the
``moe_routing.PREFILL_*`` constants), ``compress:default`` or ``compress:BM:BN:WARPS:STAGES``
(``linear.FP32X_*``). ``--pick LOG``: the ``--launch-constant`` flags of each kind's fastest
variant with the default's bits (more than 3 % faster than the default, else the defaults'
values). Per variant: the median µs a call (CUDA events around 10 back-to-back
calls, ``roofline.median_ms``), TFLOP/s, the fraction of the bf16 matmul rate measured in the
same run, and whether the output equals the kernel's default bit for bit (the tilings keep
each output's K order, so any difference is a finding). The smoke runs the interpreter's own
small launch for every variant and its error against the torch reference (the
routing weights and ids; the projection in fp64), not the GPU tilings, which
tests/kernels/triton compiles for SM90.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_args  # noqa: E402

HIDDEN, EXPERTS, TOPK, HEAD_DIM = 5120, 384, 6, 512  # data/deepseek-v4.1-flash/config.json
DEFAULT_VARIANTS = ("route:default,route:64:128:64:4:4,route:128:64:64:8:4,"
                    "route:128:128:64:8:3,route:64:64:128:4:3,route:64:128:64:4:3,route:default,"
                    "compress:default,compress:64:128:4:4,compress:128:64:4:4,"
                    "compress:64:64:4:4,compress:128:128:8:4,compress:64:128:4:3,"
                    "compress:default")
ROUTE_FIELDS = ("PREFILL_BM", "PREFILL_BE", "PREFILL_BK", "PREFILL_WARPS", "PREFILL_STAGES")
COMPRESS_FIELDS = ("FP32X_BM", "FP32X_BN", "FP32X_WARPS", "FP32X_STAGES")


def pick(log: str, margin: float = 0.03) -> str:
    """``kernel_overrides.py --launch-constant`` flags from a sweep's printed table: per kind,
    the fastest variant whose bits equal the default's when it beats the default's best time by
    more than ``margin``, else the default's constants."""
    from deepinfer.kernels.triton import linear, moe_routing

    modules = {"route": ("moe_routing", moe_routing, ROUTE_FIELDS),
               "compress": ("linear", linear, COMPRESS_FIELDS)}
    times: dict[str, dict[str, float]] = {kind: {} for kind in modules}
    for line in open(log, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        kind, _, values = cells[0].partition(":")
        if kind not in modules or len(cells) < 5 or cells[4] == "False":
            continue
        try:
            us = float(cells[1])
        except ValueError:  # a failed row
            continue
        times[kind][values] = min(us, times[kind].get(values, us))
    flags = []
    for kind, (name, module, fields) in modules.items():
        values = [getattr(module, f) for f in fields]
        rows = times[kind]
        if rows and "default" in rows:
            best = min(rows, key=rows.get)
            if best != "default" and rows[best] < rows["default"] * (1 - margin):
                values = [int(v) for v in best.split(":")]
        flags += [f"--launch-constant {name}.{f}={v}" for f, v in zip(fields, values,
                                                                         strict=True)]
    return " ".join(flags)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--pick":
        print(pick(sys.argv[2]))
        return 0
    args = sweep_args.parse(__doc__, DEFAULT_VARIANTS, "96 tokens, D=64, 16 experts",
                            lambda ap: ap.add_argument("--tokens", type=int, default=4096))
    from deepinfer.kernels.triton import linear, moe_routing

    device = args.device
    n = 96 if args.smoke else args.tokens
    dim, experts, out_features = (64, 16, 32) if args.smoke else (HIDDEN, EXPERTS, HEAD_DIM)
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(n, dim, generator=g).to(torch.bfloat16).to(device)
    gate = (torch.randn(experts, dim, generator=g) * 0.02).to(torch.bfloat16).to(device)
    bias = (torch.randn(experts, generator=g) * 0.1).to(device)
    w = (torch.randn(out_features, dim, generator=g) * 0.02).to(torch.bfloat16).to(device)
    defaults = {"route": {f: getattr(moe_routing, f) for f in ROUTE_FIELDS},
                "compress": {f: getattr(linear, f) for f in COMPRESS_FIELDS}}
    modules = {"route": (moe_routing, ROUTE_FIELDS), "compress": (linear, COMPRESS_FIELDS)}
    calls = {"route": lambda: moe_routing.route_sqrtsoftplus(x, gate, bias, None, None, TOPK,
                                                             1.5),
             "compress": lambda: linear.linear(x, w, out_dtype=torch.float32, promoted=True)}
    flops = {"route": 2 * n * dim * experts, "compress": 2 * n * dim * out_features}
    bf16 = None
    if not args.smoke:
        from roofline import measure_ceilings, median_ms

        bf16 = measure_ceilings()["bf16_flops_per_s"]
        print(f"{torch.cuda.get_device_name()}: bf16 {bf16 / 1e12:.0f} TFLOP/s; {n} tokens, "
              f"D={dim}, {experts} experts, compressor O={out_features}")
    print("| variant | µs a call | TFLOP/s | of bf16 | bits as default |")
    print("|---|---:|---:|---:|---|")
    firsts: dict[str, torch.Tensor] = {}
    want = {}
    if args.smoke:
        from deepinfer.kernels.reference import moe as ref_moe

        weights, ids = ref_moe.route_sqrtsoftplus(x, gate, bias, None, None, TOPK, 1.5)
        want = {"route": torch.cat([weights.float(), ids.float()], 1),
                "compress": x.double() @ w.double().T}
    for variant in args.variants.split(","):
        kind, _, values = variant.partition(":")
        assert kind in modules, f"variant {variant!r}: route:... or compress:..."
        module, fields = modules[kind]
        sweep_args.set_int_constants(module, defaults[kind], fields, values or "default", kind)

        def flat(kind=kind):
            out = calls[kind]()
            return torch.cat([o.float().reshape(n, -1) for o in out], 1) if kind == "route" \
                else out

        out = flat() if args.smoke else sweep_args.try_variant(variant, flat)
        if out is None:
            continue
        same = "—" if kind not in firsts else str(torch.equal(out, firsts[kind]))
        firsts.setdefault(kind, out)
        if args.smoke:  # the interpreter's launch against the torch reference
            print(f"| {variant} | - | - | - | {same} | max abs err vs reference "
                  f"{(out - want[kind]).abs().max().item():.2e} |")
            continue
        us = median_ms(calls[kind], calls=10) * 1e3
        rate = flops[kind] / (us * 1e-6)
        print(f"| {variant} | {us:.1f} | {rate / 1e12:.0f} | {rate / bf16:.2f} | {same} |",
              flush=True)
    for kind, (module, fields) in modules.items():
        sweep_args.set_int_constants(module, defaults[kind], fields, "default", kind)
    return 0


if __name__ == "__main__":
    sys.exit(main())
