"""Instruction mix of the expert GEMM's K loop in SASS, compiled for sm_90 on the CPU.

    python bench/moe_sass.py [--down] [W_ONE_MUL=2 BN=64 BK=256 num_warps=4 num_stages=4
                              maxnreg=168 ...]

Compiles ``moe_experts._moe_gemm_kernel`` (gated by default, ``--down`` for the down
projection) at the decode tile (BM=16, BN=64, BK=256, A_BF16, W_ONE_MUL) with any constexpr or
launch option overridden as NAME=VALUE, through ``triton.compile(..., GPUTarget("cuda", 90,
32))`` (no GPU needed), disassembles the cubin with Triton's bundled nvdisasm and prints the
registers, spill stack and shared memory, and the opcode counts of the longest loop (the block
between a label and the backward branch to it: the K loop). What session 7 used to compare
unpack and layout variants before spending device time; a count, not a timing.
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sm90_compile  # noqa: E402

NAMES = ("a_ptr", "a_scale_ptr", "w1_ptr", "s1_ptr", "w3_ptr", "s3_ptr", "sorted_pairs_ptr",
         "block_expert_ptr", "route_w_ptr", "out_ptr", "out_scale_ptr", "num_pairs", "O", "K",
         "a_row_div", "limit", "stride_am", "stride_asm", "stride_we", "stride_wn", "stride_se",
         "stride_sn", "stride_om", "stride_osm")
TYPES = {"a_ptr": "*bf16", "a_scale_ptr": "*u8", "w1_ptr": "*u8", "s1_ptr": "*u8",
         "w3_ptr": "*u8", "s3_ptr": "*u8", "sorted_pairs_ptr": "*i32", "block_expert_ptr": "*i32",
         "route_w_ptr": "*fp32", "out_ptr": "*bf16", "out_scale_ptr": "*u8", "limit": "fp32"}
LAUNCH_OPTIONS = ("num_warps", "num_stages", "maxnreg")


def compile_kernel(gated: bool, overrides: dict):
    """The compiled kernel (triton's CompiledKernel) for sm_90."""
    os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from deepinfer.kernels.triton import moe_experts

    constexprs = dict(GATED=gated, FMT=0, SCALE_ROWS=1, MMA_FP8=False, DOT_BF16=True, ACT=1,
                      SPLIT_K=True, A_BF16=True, BM=16, BN=64, BK=256,
                      W_ONE_MUL=True, W_WORDS=False, W_W4A8=False)
    options = dict(num_warps=4, num_stages=4)
    for name, value in overrides.items():
        (options if name in LAUNCH_OPTIONS else constexprs)[name] = value
    signature = {n: TYPES.get(n, "i32") for n in NAMES}
    aligned = [i for i, n in enumerate(NAMES)
               if signature[n].startswith("*") or n.startswith("stride") or n in ("O", "K")]
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    src = ASTSource(moe_experts._moe_gemm_kernel, signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def longest_loop_mix(sass: str) -> tuple[int, collections.Counter]:
    """(instructions, opcode counts) of the longest label..backward-branch block of ``sass``."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines)
              if (m := re.match(r"^(\.L_x_\d+):", line.strip()))}
    best = None
    for i, line in enumerate(lines):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        start = labels.get(m.group(1), i) if m else i
        if start < i and (best is None or i - start > best[1] - best[0]):
            best = (start, i)
    if best is None:
        return 0, collections.Counter()
    mix = collections.Counter()
    for line in lines[best[0]:best[1] + 1]:
        m = re.match(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+(?:\.[A-Z0-9_]+)?)", line)
        if m:
            mix[m.group(1)] += 1
    return sum(mix.values()), mix


def parse_overrides(ap: argparse.ArgumentParser, items: list[str]) -> dict:
    """NAME=VALUE items -> {name: Python literal} (an argparse error otherwise)."""
    overrides = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            overrides[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            ap.error(f"{item!r}: expected NAME=VALUE with a Python literal value")
    return overrides


def report(compiled, label: str, loop: str) -> int:
    """Print registers, spill stack, shared memory and the longest loop's opcode counts of a
    compiled kernel; exit status 1 when no loop is found."""
    regs, stack = sm90_compile.registers_and_stack(compiled)
    regs, stack = ("?", "?") if regs is None else (regs, stack)
    sass = sm90_compile.cubin_tool(compiled, "nvdisasm", "-c")
    total, mix = longest_loop_mix(sass)
    print(f"{label}: registers {regs}, spill stack {stack} B, shared {compiled.metadata.shared} B")
    print(f"{loop}: {total} instructions; "
          + ", ".join(f"{op} {n}" for op, n in mix.most_common(12)))
    return 0 if total else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--down", action="store_true", help="the down projection (GATED=False)")
    ap.add_argument("overrides", nargs="*", help="NAME=VALUE (constexprs or launch options)")
    args = ap.parse_args()
    overrides = parse_overrides(ap, args.overrides)
    return report(compile_kernel(not args.down, overrides),
                  f"{'down' if args.down else 'gated'} {overrides}", "K loop")


if __name__ == "__main__":
    sys.exit(main())
