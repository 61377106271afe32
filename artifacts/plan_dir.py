"""The plan directory: written by ``deepinfer-compile``, verified and read by ``deepinfer-run``.

::

    plan/
      plan.json      the plan (canonical JSON: sorted keys, 12-significant-digit floats)
      manifest.json  schema_version, plan_id, and {"bytes", "sha256"} of every other file
      report.md      the plan explained for a person
      kernel-cache/  (written by deepinfer-run on a GPU, not in the manifest) compiled Triton
                     kernels, so that a plan copied to a fresh machine starts warm

``write_plan`` builds the directory in a temporary sibling and renames it into place, so a reader
never sees a half-written plan; it replaces an existing directory only when that holds the same
plan (same ``plan_id``) or ``force`` is set, and never replaces a directory that is not a plan.
``read_plan`` checks every manifest entry (presence, size, sha256), the schema version and the
required keys before it returns the plan. Every failure is a :class:`PlanError` naming the file
and the field. ``docs/plan_format.md`` documents the keys. Rewriting a plan keeps its
``kernel-cache/`` (entries are keyed by kernel source, options, GPU and Triton version: an entry
the new plan does not launch is never read).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from deepinfer.artifacts.plan_schema import (
    KERNEL_CACHE_DIR,
    MANIFEST_FILE,
    PLAN_FILE,
    REPORT_FILE,
    REQUIRED_KEYS,
    SCHEMA_VERSION,
    PlanError,
)

__all__ = ["canonical_json", "plan_json_bytes", "read_plan", "verify_manifest", "write_plan"]

FLOAT_DIGITS = 12  # significant digits kept: hides last-bit noise, keeps every planned quantity


# ---- canonical JSON -----------------------------------------------------------------------------
def canonical_json(value: Any) -> str:
    """Deterministic JSON text: dict keys sorted, one key per line, lists of scalars on one line,
    floats rounded to ``FLOAT_DIGITS`` significant digits, a final newline.

    Accepts dicts (str keys), lists, tuples, str, int, float, bool, None, and objects with a
    ``tolist()`` method (numpy arrays and scalars, torch tensors). Raises PlanError (field = the
    dotted path) for anything else and for NaN or infinity.
    """
    return _dump(value, "", "") + "\n"


def plan_json_bytes(plan: dict[str, Any]) -> bytes:
    """The exact bytes of ``plan.json`` for ``plan`` (the same plan always gives the same bytes)."""
    return canonical_json(plan).encode("utf-8")


def _dump(value: Any, where: str, pad: str) -> str:
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        value = value.tolist()
    if value is None or isinstance(value, bool | str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PlanError(PLAN_FILE, where or "<root>", f"{value} is not a finite number")
        return repr(float(f"{value:.{FLOAT_DIGITS}g}"))
    inner = pad + " "
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = []
        for key in sorted(value, key=lambda k: _check_key(k, where)):
            child = f"{where}.{key}" if where else key
            items.append(f"{inner}{json.dumps(key, ensure_ascii=False)}: "
                         f"{_dump(value[key], child, inner)}")
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list | tuple):
        parts = [_dump(v, f"{where}[{i}]", inner) for i, v in enumerate(value)]
        if all("\n" not in p for p in parts) and not any(
                isinstance(v, dict | list | tuple) for v in value):
            return "[" + ", ".join(parts) + "]"
        return "[\n" + ",\n".join(inner + p for p in parts) + "\n" + pad + "]"
    raise PlanError(PLAN_FILE, where or "<root>", f"cannot store a {type(value).__name__} in a "
                    "plan (expected dict, list, str, int, float, bool or null)")


def _check_key(key: Any, where: str) -> str:
    if not isinstance(key, str):
        raise PlanError(PLAN_FILE, where or "<root>", f"dict key {key!r} is a "
                        f"{type(key).__name__}; plan keys must be strings")
    return key


# ---- writing ------------------------------------------------------------------------------------
def write_plan(out_dir: str | Path, plan: dict[str, Any], report_md: str,
               force: bool = False) -> Path:
    """Write ``plan.json``, ``report.md`` and ``manifest.json`` atomically into ``out_dir``.

    An existing ``out_dir`` is replaced when it is empty, when it holds the same plan (same
    ``plan_id``: the rewrite is a no-op in content) or, with ``force``, when it holds another
    plan. A directory that is not a plan directory (no ``manifest.json`` / ``plan.json``) is
    never replaced. Returns the directory.

    Raises:
        PlanError: the plan lacks a required key, holds a value JSON cannot represent, or
            ``out_dir`` may not be replaced.
    """
    _check_plan(plan, "<plan>")
    contents = {PLAN_FILE: plan_json_bytes(plan), REPORT_FILE: report_md.encode("utf-8")}
    manifest = {
        "schema_version": plan["schema_version"],
        "plan_id": plan["plan_id"],
        "files": {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                  for name, data in contents.items()},
    }
    contents[MANIFEST_FILE] = canonical_json(manifest).encode("utf-8")

    out = Path(out_dir).absolute()
    if out.exists() or out.is_symlink():
        _check_replaceable(out, plan["plan_id"], force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        for name, data in contents.items():
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        _rename_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _rename_into_place(tmp: Path, out: Path) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)
        raise
    if (old / KERNEL_CACHE_DIR).is_dir():  # compiled kernels outlive a rewrite of the plan
        os.rename(old / KERNEL_CACHE_DIR, out / KERNEL_CACHE_DIR)
    shutil.rmtree(old, ignore_errors=True)


def _check_replaceable(out: Path, plan_id: str, force: bool) -> None:
    if out.is_symlink() or not out.is_dir():
        raise PlanError(str(out), "", "exists and is not a directory; choose another output path")
    if not any(out.iterdir()):
        return
    manifest_path = out / MANIFEST_FILE
    if not manifest_path.exists() and not (out / PLAN_FILE).exists():
        raise PlanError(str(out), "", "exists and is not a plan directory (no manifest.json); "
                        "refusing to replace it, even with --force; choose another output path")
    try:
        existing = json.loads(manifest_path.read_text()).get("plan_id")
    except (OSError, ValueError, AttributeError):
        existing = None
    if existing == plan_id or force:
        return
    found = f"plan {existing[:16]}" if isinstance(existing, str) else "an unreadable plan"
    raise PlanError(str(out), "plan_id", f"holds {found}, not the new plan {plan_id[:16]}; pass "
                    "--force (force=True) to replace it")


def _check_plan(plan: Any, source: str) -> None:
    if not isinstance(plan, dict):
        raise PlanError(source, "", f"expected a JSON object, got {type(plan).__name__}")
    for key in REQUIRED_KEYS:
        if key not in plan:
            raise PlanError(source, key, "missing (required top-level key)")
    if plan["schema_version"] != SCHEMA_VERSION:
        raise PlanError(source, "schema_version", f"expected {SCHEMA_VERSION} (this deepinfer's "
                        f"plan format), got {plan['schema_version']!r}; recompile the topology")
    if not isinstance(plan["plan_id"], str) or not plan["plan_id"]:
        raise PlanError(source, "plan_id", f"expected a non-empty string, got {plan['plan_id']!r}")


# ---- reading ------------------------------------------------------------------------------------
def verify_manifest(plan_dir: str | Path) -> dict[str, Any]:
    """Check every file the manifest lists (present, size, sha256); return the manifest.

    Files the manifest does not list are ignored (they are not part of the plan).
    """
    root = Path(plan_dir)
    if not root.is_dir():
        raise PlanError(str(root), "", "not found (expected a plan directory written by "
                        "deepinfer-compile)")
    source = str(root / MANIFEST_FILE)
    try:
        manifest = json.loads((root / MANIFEST_FILE).read_text())
    except FileNotFoundError:
        raise PlanError(source, "", "missing: not a plan directory, or an interrupted write") \
            from None
    except (OSError, ValueError) as exc:
        raise PlanError(source, "", f"unreadable ({exc})") from None
    if not isinstance(manifest, dict):
        raise PlanError(source, "", "expected a JSON object")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise PlanError(source, "schema_version", f"expected {SCHEMA_VERSION}, got "
                        f"{manifest.get('schema_version')!r}; recompile the topology")
    listed = manifest.get("files")
    if not isinstance(listed, dict) or PLAN_FILE not in listed:
        raise PlanError(source, "files", f"expected an object listing at least {PLAN_FILE}")
    for name, entry in sorted(listed.items()):
        _verify_file(root, name, entry, source)
    return manifest


def _verify_file(root: Path, name: str, entry: Any, source: str) -> None:
    field = f"files.{name}"
    relative = PurePosixPath(name)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise PlanError(source, field, "expected a path inside the plan directory")
    if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int) or not isinstance(
            entry.get("sha256"), str):
        raise PlanError(source, field, 'expected {"bytes": int, "sha256": hex string}')
    path = root / relative
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise PlanError(str(path), "", f"missing (listed in {MANIFEST_FILE})") from None
    except OSError as exc:
        raise PlanError(str(path), "", f"unreadable ({exc})") from None
    if len(data) != entry["bytes"]:
        raise PlanError(str(path), "", f"{len(data)} bytes, but {MANIFEST_FILE} {field}.bytes "
                        f"says {entry['bytes']}: the file was modified or truncated; recompile")
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        raise PlanError(str(path), "", f"sha256 {digest[:16]}..., but {MANIFEST_FILE} "
                        f"{field}.sha256 says {entry['sha256'][:16]}...: the file was modified; "
                        "recompile")


def read_plan(plan_dir: str | Path) -> dict[str, Any]:
    """Verify ``plan_dir`` (manifest, schema version, required keys) and return ``plan.json``."""
    manifest = verify_manifest(plan_dir)
    source = str(Path(plan_dir) / PLAN_FILE)
    try:
        plan = json.loads((Path(plan_dir) / PLAN_FILE).read_text())
    except ValueError as exc:
        raise PlanError(source, "", f"not valid JSON ({exc})") from None
    _check_plan(plan, source)
    if plan["plan_id"] != manifest.get("plan_id"):
        raise PlanError(source, "plan_id", f"{plan['plan_id'][:16]} differs from "
                        f"{MANIFEST_FILE} plan_id {str(manifest.get('plan_id'))[:16]}")
    return plan
