"""Where a kernel's loops wait for their wgmmas, from its sm_90 SASS (compiled on the CPU).

    python bench/gluon_sass.py deepinfer.kernels.triton.linear_wide [CASE_ID ...]

For each of the module's ``aot_cases()`` (or the ids named), compiled with
``sm90_compile.compile_case`` and disassembled with Triton's nvdisasm: per loop (a label and the
backward branch to it) that issues ``HGMMA``s, its instructions, HGMMAs and
``WARPGROUP.DEPBAR``s (the waits for them), and how many instructions run between HGMMAs and
the wait for them (they overlap the tensor cores) against the rest (they do not). Session 16:
``moe_gluon_w4a16_prefill`` decoded its weights after the wait although the PTX had the decode
before it; the shipped ``linear_wide`` (BK 64) overlaps about half of its loop
(docs/performance.md, "What the SASS shows"). Session 17 (bench/w4a16_probe.py, removed in
session 42: code at ad9ad7b): more overlap did not make that kernel faster — two programs per
SM already hide the decode. A count, not a timing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

if __name__ == "__main__":  # before triton is imported: compile, not interpret (an import, as
    os.environ.pop("TRITON_INTERPRET", None)  # the tests' wgmma_loops, leaves the env alone)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sm90_compile  # noqa: E402

INSTR = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+(?:\.[A-Z0-9_]+)*)")


def wgmma_loops(sass: str) -> list[dict]:
    """Each loop of ``sass`` with HGMMAs (a label and a backward branch to it with no EXIT
    between: Triton puts the mbarrier retry stubs after the kernel's end): {"instructions",
    "hgmma", "waits", "overlapped", "not_overlapped"} — the last two split the loop's other
    instructions into those between a group of HGMMAs and the WARPGROUP.DEPBAR that waits for
    it (they run while the tensor cores work) and the rest."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines)
              if (m := re.match(r"^(\.L_x_\d+):", line.strip()))}
    loops = []
    for end, line in enumerate(lines):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        start = labels.get(m.group(1)) if m else None
        if start is None or start >= end:
            continue
        ops = [mo.group(1) for text in lines[start:end + 1] if (mo := INSTR.match(text))]
        hgmma = [i for i, op in enumerate(ops) if op.startswith("HGMMA")]
        if not hgmma or "EXIT" in ops:  # no wgmma, or a retry stub after the kernel's end
            continue                    # branching back into a loop: not a loop itself
        waits = [i for i, op in enumerate(ops) if op.startswith("WARPGROUP.DEPBAR")]
        # instructions between each wait and the wgmmas it waits for (the last HGMMA before
        # it, if no other wait came in between): they run while the tensor cores work
        overlapped, prev = 0, -1
        for w in waits:
            issued = [h for h in hgmma if prev < h < w]
            if issued:
                overlapped += w - issued[-1] - 1
            prev = w
        loops.append({"instructions": len(ops), "hgmma": len(hgmma), "waits": len(waits),
                      "overlapped": overlapped,
                      "not_overlapped": len(ops) - len(hgmma) - len(waits) - overlapped})
    return loops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("module", help="a kernel module with aot_cases(), e.g. "
                    "deepinfer.kernels.triton.moe_gluon_w4a16_prefill")
    ap.add_argument("cases", nargs="*", help="case ids (default: all)")
    args = ap.parse_args()
    cases = importlib.import_module(args.module).aot_cases()
    chosen = [c for c in cases if not args.cases or c.get("id", c.get("name")) in args.cases]
    if not chosen:
        ap.error(f"no case of {args.module} matches {args.cases}: "
                 f"{[c.get('id', c.get('name')) for c in cases]}")
    print("| case | loop | instructions | HGMMA | waits | overlapped | not overlapped |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    found = 0
    for case in chosen:
        sass = sm90_compile.cubin_tool(sm90_compile.compile_case(case), "nvdisasm", "-c")
        for n, loop in enumerate(wgmma_loops(sass)):
            found += 1
            print(f"| {case['id']} | {n} | {loop['instructions']} | {loop['hgmma']} | "
                  f"{loop['waits']} | {loop['overlapped']} | {loop['not_overlapped']} |")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
