"""``deepinfer-compile topology.yaml``: argument parsing only (the planner issue fills it in)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="deepinfer-compile",
        description="Compile a topology into a static plan directory.")
    parser.add_argument("topology", nargs="?", default="builtin:tiny-cpu",
                        help="topology.yaml (default: the built-in tiny-cpu topology)")
    parser.add_argument("-o", "--output", default="plan", help="plan directory to write")
    parser.parse_args(argv)
    print("deepinfer-compile: not implemented yet — the planner is the next issue. "
          "Run the model directly with `deepinfer-run --model builtin:tiny`.", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
