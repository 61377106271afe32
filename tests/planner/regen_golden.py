"""Golden plans of the built-in topologies: what they are, and how to regenerate them.

    python -m tests.planner.regen_golden            # every built-in topology
    python -m tests.planner.regen_golden tiny-cpu   # just one

Changing a golden file is a deliberate act: regenerate, read the diff (``git diff
tests/planner/golden``), and say in the commit why the plan changed.

Small plans are stored whole (``golden/<name>.plan.json``). Big plans (over ``MAX_WHOLE_BYTES``)
are stored as ``golden/<name>.digest.json``: the sha256 of the whole plan.json and of every
top-level section (so a failure names the section that changed), plus the stable keys of
``docs/plan_format.md`` (``STABLE_KEYS``), in full when small, else as a sha256 and a length.
``deepinfer_version`` is blanked in both forms, so a release does not churn the goldens.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from deepinfer.artifacts.plan_dir import canonical_json, plan_json_bytes
from deepinfer.artifacts.plan_schema import STABLE_KEYS
from deepinfer.planner.compile import compile_plan
from deepinfer.planner.topology_schema import builtin_topology_names, load_topology

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
MAX_WHOLE_BYTES = 64 * 1024  # plans up to this size are stored whole
MAX_INLINE_BYTES = 4 * 1024  # stable-key values up to this size are stored in full
VERSION_PLACEHOLDER = "(not compared)"


def golden_plan(name: str) -> dict[str, Any]:
    """The plan of ``builtin:<name>`` as the golden files see it (version blanked)."""
    plan = compile_plan(load_topology(f"builtin:{name}"))
    return {**plan, "deepinfer_version": VERSION_PLACEHOLDER}


def _sha256(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def stable_values(plan: dict[str, Any]) -> dict[str, Any]:
    """Each of ``STABLE_KEYS`` -> its value (``[*]`` collects over a list)."""
    return {key: _lookup(plan, key.split(".")) for key in STABLE_KEYS}


def _lookup(value: Any, parts: list[str]) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if head.endswith("[*]"):
        return [_lookup(item, rest) for item in value[head.removesuffix("[*]")]]
    return _lookup(value[head], rest)


def digest(plan: dict[str, Any]) -> dict[str, Any]:
    """The digest form of a big plan (see the module docstring)."""
    stable = {}
    for key, value in stable_values(plan).items():
        text = canonical_json(value)
        stable[key] = value if len(text) <= MAX_INLINE_BYTES else {
            "sha256": _sha256(value), "length": len(value)}
    return {
        "plan_json_sha256": hashlib.sha256(plan_json_bytes(plan)).hexdigest(),
        "plan_id": plan["plan_id"],
        "sections_sha256": {k: _sha256(v) for k, v in sorted(plan.items())},
        "stable": stable,
    }


def golden_files(name: str, plan: dict[str, Any]) -> dict[Path, bytes]:
    """The golden file(s) for ``plan`` (whole or digest, by size)."""
    data = plan_json_bytes(plan)
    if len(data) <= MAX_WHOLE_BYTES:
        return {GOLDEN_DIR / f"{name}.plan.json": data}
    return {GOLDEN_DIR / f"{name}.digest.json": canonical_json(digest(plan)).encode("utf-8")}


def regenerate(names: list[str]) -> None:
    GOLDEN_DIR.mkdir(exist_ok=True)
    for name in names:
        for stale in GOLDEN_DIR.glob(f"{name}.*.json"):
            stale.unlink()
        for path, data in golden_files(name, golden_plan(name)).items():
            path.write_bytes(data)
            print(f"wrote {path.relative_to(GOLDEN_DIR.parent.parent.parent)} ({len(data)} B)")


if __name__ == "__main__":
    regenerate(sys.argv[1:] or builtin_topology_names())
