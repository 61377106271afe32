"""Where a kernel's warps wait, from Nsight Compute's per-SASS-instruction warp-state sampling
(``ncu --section SourceCounters --section WarpStateStats --page source --print-source sass
--csv``; rounds 143, 222), grouped so a warp-specialized kernel's partitions read apart.

    python bench/ncu_source_summary.py bench/results/.../ncu_source_ws_4096.csv.xz [--top 14]

Instructions that run equally often belong together (a loop body of one partition runs each of
its instructions once a step and warp; a producer warp's wait loop, the idle warps of a padded
worker warpgroup at their register release, each have counts of their own): per execution
count, the instructions, their share of all samples and the stall reasons' shares within the
group. Then, for the group with the most samples (the consumers' main loop, usually), the same
by opcode. A kernel-level stall ratio (ncu's ``smsp__average_warps_issue_stalled_*``) mixes
these: round 222's "barrier" 3.8 cycles an instruction was mostly the producer warpgroup's
three idle warps. Reads .csv or .csv.xz; prints tables.
"""

from __future__ import annotations

import argparse
import collections
import csv
import lzma
import sys
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read_rows(path: Path) -> list[dict[str, str]]:
    """The CSV's instruction rows as dicts (ncu's log lines before the header skipped)."""
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address","Source"')),
                 None)
    if start is None:
        raise SystemExit(f"{path}: no '\"Address\",\"Source\"' header (an ncu --page source "
                         "--csv export expected)")
    reader = csv.DictReader(lines[start:])
    return [row for row in reader if row.get("Source") is not None]


def _num(row: dict[str, str], key: str) -> float:
    try:
        return float(row.get(key) or 0)
    except ValueError:
        return 0.0


def opcode(source: str) -> str:
    """``@!P0 BRA 0x...`` -> BRA; ``LOP3.LUT R1, ...`` -> LOP3."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def summarize(rows: list[dict[str, str]], top: int = 14) -> dict:
    """{"total": samples, "groups": [(executions, instructions, share, {reason: share})],
    "opcodes": [(opcode, instructions, share of the group, {reason: share of the group})]}
    — groups by execution count, most samples first; opcodes of the heaviest group."""
    reasons = [k for k in (rows[0].keys() if rows else [])
               if k.startswith("stall_") and "Not Issued" not in k]
    total = sum(_num(r, SAMPLES) for r in rows) or 1.0
    groups: dict[int, list] = collections.defaultdict(list)
    for r in rows:
        groups[int(_num(r, EXECUTED))].append(r)

    def mix(members, denom):
        c = collections.Counter()
        for r in members:
            for k in reasons:
                c[k[len("stall_"):]] += _num(r, k)
        return {k: v / denom for k, v in c.most_common() if v}

    ranked = sorted(groups.items(), key=lambda kv: -sum(_num(r, SAMPLES) for r in kv[1]))
    out = {"total": total, "groups": [], "opcodes": []}
    for execs, members in ranked[:top]:
        s = sum(_num(r, SAMPLES) for r in members) or 1.0
        out["groups"].append((execs, len(members), s / total, mix(members, s)))
    if ranked:
        members = ranked[0][1]
        s = sum(_num(r, SAMPLES) for r in members) or 1.0
        by_op = collections.defaultdict(list)
        for r in members:
            by_op[opcode(r["Source"])].append(r)
        ops = sorted(by_op.items(), key=lambda kv: -sum(_num(r, SAMPLES) for r in kv[1]))
        for op, ms in ops[:top]:
            out["opcodes"].append((op, len(ms), sum(_num(r, SAMPLES) for r in ms) / s,
                                   mix(ms, s)))
    return out


def _mix_text(m: dict[str, float], n: int = 5) -> str:
    return ", ".join(f"{k} {v:.0%}" for k, v in list(m.items())[:n])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--top", type=int, default=14)
    args = ap.parse_args()
    if not args.csv.exists():
        ap.error(f"{args.csv}: no such file")
    res = summarize(read_rows(args.csv), args.top)
    print(f"samples: {res['total']:.0f}")
    print("| executions | instructions | of all samples | stall reasons within |")
    print("|---:|---:|---:|---|")
    for execs, n, share, m in res["groups"]:
        print(f"| {execs} | {n} | {share:.1%} | {_mix_text(m)} |")
    print("\nthe heaviest group by opcode (shares of that group's samples):")
    print("| opcode | instructions | samples | stall reasons |")
    print("|---|---:|---:|---|")
    for op, n, share, m in res["opcodes"]:
        print(f"| {op} | {n} | {share:.1%} | {_mix_text(m, 4)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
