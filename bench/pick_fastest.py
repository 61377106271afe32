"""Print the fastest variant of a markdown timing table: rows ``| name | ms | ...`` (failed rows
and other tables skipped); ``--prefix`` keeps only names starting with it; ``--strip`` removes that
prefix from the printed name. Used by device rounds to feed one bench's winner to the next.

    python bench/pick_fastest.py LOG [--prefix float:] [--strip]
"""

from __future__ import annotations

import argparse
import sys


def fastest(lines: list[str], prefix: str = "") -> str | None:
    best: tuple[float, str] | None = None
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith(prefix):
            continue
        try:
            ms = float(cells[1])
        except ValueError:
            continue
        if best is None or ms < best[0]:
            best = (ms, cells[0])
    return None if best is None else best[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    ap.add_argument("--prefix", default="")
    ap.add_argument("--strip", action="store_true")
    args = ap.parse_args()
    with open(args.log) as f:
        name = fastest(f.read().splitlines(), args.prefix)
    if name is None:
        return 1
    print(name[len(args.prefix):] if args.strip else name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
