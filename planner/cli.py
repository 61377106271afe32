"""``deepinfer-compile [TOPOLOGY] [-o OUT_DIR] [--force] [--explain]``: argument parsing only.

Exit status: 0 the plan was written; 2 invalid input (the topology, the model config, the load
statistics, or an output directory holding another plan) with a one-line message on stderr
naming the file and the field; 1 an internal error (a bug: a short message, no traceback). On
any error nothing is written.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from deepinfer.artifacts.plan_dir import write_plan
from deepinfer.artifacts.plan_schema import PlanError
from deepinfer.planner.compile import compile_plan
from deepinfer.planner.errors import TopologyError
from deepinfer.planner.report import render_report
from deepinfer.planner.topology_schema import (
    BUILTIN_PREFIX,
    DEFAULT_TOPOLOGY,
    builtin_topology_names,
    load_topology,
)

PROG = "deepinfer-compile"
EXIT_OK, EXIT_INTERNAL, EXIT_INVALID = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    names = ", ".join(BUILTIN_PREFIX + n for n in builtin_topology_names())
    parser = argparse.ArgumentParser(
        prog=PROG, description="Compile a topology into a static, verified plan directory.")
    parser.add_argument("topology", nargs="?", default=DEFAULT_TOPOLOGY,
                        help=f"topology.yaml or builtin:NAME (default {DEFAULT_TOPOLOGY}; "
                        f"built-ins: {names})")
    parser.add_argument("-o", "--output", default="plan", metavar="OUT_DIR",
                        help="plan directory to write (default: plan/)")
    parser.add_argument("--force", action="store_true",
                        help="replace OUT_DIR even when it holds a different plan")
    parser.add_argument("--explain", action="store_true",
                        help="print the report (report.md) to stdout")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        topology = load_topology(args.topology)
        plan = compile_plan(topology)
        report = render_report(plan)
        out = write_plan(args.output, plan, report, force=args.force)
    except (TopologyError, PlanError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except Exception as exc:  # a bug, not a bad input: say where, briefly
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        print(f"{PROG}: internal error: {type(exc).__name__}: {exc} (at {frame.filename}:"
              f"{frame.lineno}); please report it with the topology file", file=sys.stderr)
        return EXIT_INTERNAL
    for warning in plan["warnings"]:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    if args.explain:
        print(report, end="")
    print(f"{PROG}: wrote {out} (plan {plan['plan_id'][:16]}, {len(plan['warnings'])} "
          "warnings)", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
