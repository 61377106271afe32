"""What holds the prefill expert GEMM (kernels/triton/moe_gluon_w4a16_prefill.py) back: the
same launches with their PTX edited before ptxas, timed on the H200.

    TRITON_INTERPRET=0 python bench/w4a16_probe.py --probe base maxnreg xor xor,maxnreg nobar

Session 17 found in the sm_90 SASS (bench/gluon_sass.py, CPU) that ptxas never schedules a
half-precision FMA (``HFMA2`` / ``HMUL2``, the decode's scale multiply) between the HGMMAs and
their ``WARPGROUP.DEPBAR``, and that at ~125 registers it decodes the BM-128 loop's next
operands into the registers the in-flight wgmmas read. Each probe is a PTX edit (comma
separated, applied in one process with its own Triton cache):

  * ``maxnreg``: ``.maxnreg 240`` (the register budget ptxas may use);
  * ``xor``: the decode's bf16x2 FMAs replaced by ``xor.b32`` — WRONG VALUES, a timing bound for
    a decode without half-precision FMAs (its rel. L2 column shows it is not a result);
  * ``nobar``: the ``bar.sync`` the membar pass adds inside the K loop after its first one
    (before each TMA copy and before the wgmmas read the token tiles; the mbarrier waits
    already order those) removed — a timing bound, not a safe kernel.

Prints one row per probe and GEMM (gated w1 / down w2 at 4,096 tokens, the 4K prefill's
shapes: 384 experts, top-6): median ms, TFLOP/s over real pairs, share of the bf16 matmul
ceiling measured in the same run, registers, rel. L2 against the reference. GPU only.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
import tempfile

PROBES = ("base", "maxnreg", "xor", "nobar")


def edit_ptx(ptx: str, probes: set[str]) -> str:
    """The probes' edits of one kernel's PTX (only the prefill expert GEMM's)."""
    if "_w4a16_prefill_kernel" not in ptx:
        return ptx
    if "maxnreg" in probes:
        ptx = re.sub(r"^(\.reqntid \d+)$", r"\1\n.maxnreg 240", ptx, count=1, flags=re.M)
    if "xor" in probes:
        ptx = re.sub(r"fma\.rn\.bf16x2 ([^,]+), ([^,]+), ([^,]+), nz;", r"xor.b32 \1, \2, \3;",
                     ptx)
    if "nobar" in probes:
        out, in_loop, kept = [], False, False
        for line in ptx.splitlines():
            if "Inner Loop Header" in line:
                in_loop, kept = True, False
            elif in_loop and re.match(r"\s*@%p\d+ bra\s+\$L__BB", line):
                in_loop = False
            if in_loop and re.match(r"\s*bar\.sync\s+0;", line):
                if kept:
                    continue
                kept = True
            out.append(line)
        ptx = "\n".join(out) + "\n"
    return ptx


def install_hook(probes: set[str]) -> None:
    """Wrap the CUDA backend's ptx stage with ``edit_ptx``."""
    from triton import knobs

    def hook(backend, stages, options, language, capability):
        make_ptx = stages["ptx"]
        stages["ptx"] = lambda src, metadata: edit_ptx(make_ptx(src, metadata), probes)

    knobs.runtime.add_stages_inspection_hook = hook


def kernel_module(path: str | None):
    """The prefill GEMM module: the package's, or one loaded from ``path`` (an earlier version
    of the file, to compare within one run: its directory goes on sys.path for its imports)."""
    if path is None:
        from deepinfer.kernels.triton import moe_gluon_w4a16_prefill
        return moe_gluon_w4a16_prefill
    import importlib.util

    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("w4a16_probe_module", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_probe(probes: set[str], num_tokens: int, module: str | None, sets: str) -> list[str]:
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import moe_decode
    from bench_common import roofline

    from deepinfer.kernels.reference.quant import dequant_fp8_ue8m0
    from deepinfer.kernels.triton import moe_align, moe_gluon, moe_gluon_w4a8, quant_act

    install_hook(probes)
    pf16 = kernel_module(module)
    for item in (x for x in sets.split(",") if x != "-"):  # module settings, read at the call
        name, value = item.split("=")
        assert hasattr(pf16, name), f"--sets {item}: {pf16.__name__} has no {name}"
        setattr(pf16, name, int(value))
    rl = roofline()
    bf16 = rl.measure_ceilings()["bf16_flops_per_s"]
    torch.manual_seed(0)
    e, d, i, k = moe_decode.EXPERTS, moe_decode.HIDDEN, moe_decode.INTER, moe_decode.TOPK
    fp4 = moe_decode.random_experts(e, d, i, "cuda")
    order = [moe_gluon_w4a8.to_kernel_order(w.data) for w in fp4]
    x, ids, _ = moe_decode.make_inputs(num_tokens, d, e, k, torch.bfloat16, "cuda")
    num_pairs = ids.numel()
    h = (torch.randn(num_pairs, i, device="cuda") * 0.5).to(torch.bfloat16)
    rows = []
    for name, act, div, w, f in (("gated w1", x, k, order[0], fp4[0]),
                                 ("down w2", h, 1, order[2], fp4[2])):
        codes, scales = quant_act.quant_q8_32(act)
        v = dequant_fp8_ue8m0(codes.view(torch.float8_e4m3fn), scales)
        ref = moe_gluon.reference_grouped(v, f.data.view(torch.uint8), f.scale, ids.reshape(-1),
                                          div)
        pairs, blocks = moe_align.align_pairs(ids, e, pf16.BLOCK_M)
        one_mul = f.scale_max is not None and f.scale_max <= 128
        gathered = pf16.gather_tokens(v.to(torch.bfloat16), pairs, num_pairs, div)
        out = torch.empty((num_pairs, w.shape[1]), dtype=torch.float32, device="cuda")
        run = functools.partial(pf16.w4a16_prefill_gemm, gathered, w, f.scale, pairs, blocks,
                                num_pairs, out, pf16.BLOCK_M, pf16.STAGES, one_mul,
                                pf16.WARPGROUPS, pf16.PARTS)
        run()
        err = ((out - ref).norm() / ref.norm()).item()
        ms = rl.median_ms(run)
        flops = 2 * num_pairs * w.shape[1] * w.shape[2] * 2
        regs = registers(pf16._w4a16_prefill_kernel)
        label = " ".join(["+".join(sorted(probes)) or "base"] + ([module] if module else [])
                         + ([sets] if sets != "-" else []))
        rows.append(f"| {label} | {name} | {ms:.3f} | "
                    f"{flops / ms / 1e9:.0f} | {flops / ms * 1e3 / bf16:.2f} | {regs} | "
                    f"{err:.1e} |")
    return rows


def registers(kernel) -> str:
    """Registers per thread of the kernel's compiled variant(s) ("?" if triton hides them)."""
    try:
        cache = next(iter(kernel.device_caches.values()))[0]
        return "/".join(sorted({str(c.n_regs) for c in cache.values()}))
    except Exception:  # noqa: BLE001 - triton internals differ between versions
        return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", nargs="+", default=["base"],
                        help=f"comma-separated sets of {PROBES}")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--module", nargs="+", default=["package"],
                        help="kernel module files to time ('package': the package's)")
    parser.add_argument("--sets", nargs="+", default=["-"],
                        help="module settings per run, e.g. WEIGHT_STAGES=2,STAGES=2 ('-': none)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        probes = {p for p in args.child.split(",") if p != "base"}
        module = None if args.module[0] == "package" else args.module[0]
        print("\n".join(run_probe(probes, args.tokens, module, args.sets[0])), flush=True)
        return 0
    print("| probe | GEMM | ms | TFLOP/s | of bf16 | registers | rel. L2 |")
    print("|---|---|---:|---:|---:|---:|---:|")
    rc = 0
    for spec, module, sets in [(p, m, st) for m in args.module for st in args.sets
                               for p in args.probe]:
        bad = set(spec.split(",")) - set(PROBES)
        if bad:
            parser.error(f"--probe {spec}: unknown {sorted(bad)}; expected {PROBES}")
        with tempfile.TemporaryDirectory() as cache:  # a fresh compile per probe set
            env = {**os.environ, "TRITON_CACHE_DIR": cache}
            res = subprocess.run([sys.executable, __file__, "--child", spec, "--tokens",
                                  str(args.tokens)] + ["--module", module, "--sets", sets],
                                 env=env, capture_output=True, text=True)
        print(res.stdout.strip() or f"| {spec} | failed rc={res.returncode} | | | | | |",
              flush=True)
        if res.returncode:
            rc = 1
            print(res.stderr[-3000:], file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
