"""Instruction mix of the decode sparse attention's row-chunk loop in SASS, compiled for sm_90
on the CPU (the companion of bench/moe_sass.py).

    python bench/attention_sass.py [BH=32 DJ=64 BK=32 num_warps=4 num_stages=1 maxnreg=128 ...]
    python bench/attention_sass.py --v2 [BH=32 BK=64 num_warps=8 ...]

Compiles ``attention._sparse_attn_sink_kernel`` at ``attention.launch_meta`` of the slice
model's decode launch (64 heads x 512, window records FP8 + compressed records FP4) with any
constexpr or launch option overridden as NAME=VALUE, and prints registers, spill stack, shared
memory and the opcode counts of its longest loop (one chunk of BK rows). Session 7: 244
registers at the default (1 program of 8 warps per SM; 2 need <= 128), 1,432 instructions
per 16-row chunk — a count, not a timing. ``--v2`` compiles
``attention_decode._sparse_attn_decode_kernel`` (decode kernel v2) at its ``launch_meta`` instead:
255 registers, 704 B spill stack, 128 KB shared, 1,723 instructions per 64-row chunk (27 per row
against v1's 90; ~68 of them LDL.64 reloads of spilled pointers).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moe_sass import LAUNCH_OPTIONS, parse_overrides, report  # noqa: E402

POINTERS = {"q_ptr": "*bf16", "out_ptr": "*bf16", "sink_ptr": "*fp32", "ia_ptr": "*i64",
            "ib_ptr": "*i64", "a_ptr": "*u8", "b_ptr": "*u8", "qk_scale": "fp32"}


def compile_kernel(overrides: dict, v2: bool = False):
    os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from deepinfer.kernels.triton import attention, attention_decode

    if v2:
        meta = dict(attention_decode.launch_meta(512, 64, True))
        fn = attention_decode._sparse_attn_decode_kernel
    else:
        meta = dict(attention.launch_meta(512, 64, attention.FMT_FP8,
                                          attention.FMT_FP4, True))
        fn = attention._sparse_attn_sink_kernel
    meta.update(overrides)
    options = {k: meta.pop(k) for k in LAUNCH_OPTIONS if k in meta}
    signature = {p: "constexpr" if p in meta else POINTERS.get(p, "i32")
                 for p in inspect.signature(fn.fn).parameters}
    attrs = {(i,): [["tt.divisibility", 16]] for i, (p, ty) in enumerate(signature.items())
             if ty.startswith("*") or p.startswith("stride")}
    return triton.compile(ASTSource(fn, signature, meta, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32), options=options)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="NAME=VALUE (constexprs or launch options)")
    ap.add_argument("--v2", action="store_true", help="the decode kernel v2 (attention_decode)")
    args = ap.parse_args()
    overrides = parse_overrides(ap, args.overrides)
    name = "attention v2" if args.v2 else "attention"
    return report(compile_kernel(overrides, args.v2), f"{name} {overrides}", "row-chunk loop")


if __name__ == "__main__":
    sys.exit(main())
