"""The plan directory: canonical JSON, atomic write with the overwrite rules, and read-side
verification (manifest sizes and sha256, schema version, required keys). Uses a synthetic plan,
so it needs no planner pass."""

import hashlib
import json
import os

import numpy as np
import pytest
import torch

from deepinfer.artifacts.plan_dir import canonical_json, read_plan, verify_manifest, write_plan
from deepinfer.artifacts.plan_schema import REQUIRED_KEYS, SCHEMA_VERSION, PlanError


def make_plan(plan_id: str = "a" * 64, **extra) -> dict:
    plan = {key: {} for key in REQUIRED_KEYS}
    plan.update(schema_version=SCHEMA_VERSION, deepinfer_version="0.0.test", plan_id=plan_id,
                warnings=[], cache={"num_blocks": 10, "context_bytes_per_token": 890.0,
                                    "fraction": 0.1 + 0.2})
    plan.update(extra)
    return plan


def test_canonical_json_is_sorted_stable_and_compact():
    text = canonical_json({"b": [1, 2, [3, 4]], "a": {"y": 0.1 + 0.2, "x": None, "z": True},
                           "c": np.arange(3), "d": torch.tensor([[1, 2]]), "e": np.float32(0.5),
                           "f": (1, "x")})
    assert json.loads(text) == {"a": {"x": None, "y": 0.3, "z": True}, "b": [1, 2, [3, 4]],
                                "c": [0, 1, 2], "d": [[1, 2]], "e": 0.5, "f": [1, "x"]}
    assert text.index('"a"') < text.index('"b"') < text.index('"c"')
    assert '"c": [0, 1, 2]' in text and text.endswith("}\n")
    assert canonical_json({"x": 1e-20, "y": 1e300}) == '{\n "x": 1e-20,\n "y": 1e+300\n}\n'


@pytest.mark.parametrize("bad, field", [
    ({"a": {"b": float("nan")}}, "a.b"),
    ({"a": [1, float("inf")]}, "a[1]"),
    ({"a": {1: 2}}, "a"),
    ({"a": object()}, "a"),
])
def test_canonical_json_rejects_what_json_cannot_hold(bad, field):
    with pytest.raises(PlanError) as info:
        canonical_json(bad)
    assert info.value.field == field


def test_write_then_read_round_trip(tmp_path):
    out = tmp_path / "plan"
    plan = make_plan()
    assert write_plan(out, plan, "# report\n") == out.absolute()
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "plan.json", "report.md"]
    assert read_plan(out) == json.loads(canonical_json(plan))
    manifest = verify_manifest(out)
    assert manifest["plan_id"] == plan["plan_id"]
    assert manifest["files"]["plan.json"]["bytes"] == (out / "plan.json").stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]  # no temporary left


def test_same_plan_rewrites_and_different_plan_needs_force(tmp_path):
    out = tmp_path / "plan"
    write_plan(out, make_plan(), "one")
    write_plan(out, make_plan(), "two")  # same plan_id: fine
    assert (out / "report.md").read_text() == "two"
    with pytest.raises(PlanError) as info:
        write_plan(out, make_plan("b" * 64), "three")
    assert info.value.field == "plan_id" and "--force" in info.value.message
    assert read_plan(out)["plan_id"] == "a" * 64  # untouched
    write_plan(out, make_plan("b" * 64), "three", force=True)
    assert read_plan(out)["plan_id"] == "b" * 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]


def test_never_replaces_a_directory_that_is_not_a_plan(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(PlanError, match="not a plan directory"):
        write_plan(out, make_plan(), "", force=True)
    assert (out / "notes.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(PlanError, match="not a directory"):
        write_plan(tmp_path / "file", make_plan(), "", force=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    write_plan(empty, make_plan(), "")  # an empty directory is fine
    assert read_plan(empty)["plan_id"] == "a" * 64


def test_write_rejects_incomplete_plans(tmp_path):
    plan = make_plan()
    del plan["cache"]
    with pytest.raises(PlanError) as info:
        write_plan(tmp_path / "p", plan, "")
    assert info.value.field == "cache"
    with pytest.raises(PlanError, match="schema_version"):
        write_plan(tmp_path / "p", make_plan(schema_version=SCHEMA_VERSION + 1), "")
    assert not (tmp_path / "p").exists()


@pytest.fixture
def plan_dir(tmp_path):
    out = tmp_path / "plan"
    write_plan(out, make_plan(), "# report\n")
    return out


def test_modified_file_is_caught(plan_dir):
    data = bytearray((plan_dir / "plan.json").read_bytes())
    data[data.index(b"890")] = ord("9")  # same size, different content
    (plan_dir / "plan.json").write_bytes(bytes(data))
    with pytest.raises(PlanError, match="sha256.*modified") as info:
        read_plan(plan_dir)
    assert info.value.source.endswith("plan.json")


def test_truncated_and_missing_files_are_caught(plan_dir):
    (plan_dir / "report.md").write_text("# rep")
    with pytest.raises(PlanError, match="bytes, but manifest.json files.report.md.bytes"):
        read_plan(plan_dir)
    os.remove(plan_dir / "report.md")
    with pytest.raises(PlanError, match="missing"):
        read_plan(plan_dir)


def test_manifest_problems_are_named(plan_dir):
    manifest = json.loads((plan_dir / "manifest.json").read_text())
    (plan_dir / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 0}))
    with pytest.raises(PlanError) as info:
        read_plan(plan_dir)
    assert info.value.field == "schema_version" and "recompile" in info.value.message
    bad_files = {**manifest, "files": {"../etc": {"bytes": 1, "sha256": "0"}}}
    (plan_dir / "manifest.json").write_text(json.dumps(bad_files))
    with pytest.raises(PlanError, match="plan.json"):
        read_plan(plan_dir)
    os.remove(plan_dir / "manifest.json")
    with pytest.raises(PlanError, match="manifest.json: missing"):
        read_plan(plan_dir)
    with pytest.raises(PlanError, match="not found"):
        read_plan(plan_dir.parent / "nowhere")


def test_plan_id_must_match_the_manifest(tmp_path):
    out = tmp_path / "plan"
    write_plan(out, make_plan(), "")
    other = tmp_path / "other"
    write_plan(other, make_plan("c" * 64), "")
    os.replace(other / "plan.json", out / "plan.json")
    manifest = json.loads((out / "manifest.json").read_text())
    data = (out / "plan.json").read_bytes()
    manifest["files"]["plan.json"] = {"bytes": len(data),
                                      "sha256": hashlib.sha256(data).hexdigest()}
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PlanError) as info:
        read_plan(out)
    assert info.value.field == "plan_id"


def test_rewrite_keeps_the_kernel_cache_and_verification_ignores_it(tmp_path):
    """deepinfer-run's compiled-kernel folder is not part of the plan: the manifest does not list
    it, verification passes with it, and rewriting the plan (same or forced) keeps it."""
    from deepinfer.artifacts.plan_schema import KERNEL_CACHE_DIR

    out = tmp_path / "plan"
    write_plan(out, make_plan(), "one")
    entry = out / KERNEL_CACHE_DIR / "ABC" / "k.cubin"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"\x7fELF")
    assert KERNEL_CACHE_DIR not in verify_manifest(out)["files"]
    assert read_plan(out)["plan_id"] == "a" * 64
    write_plan(out, make_plan(), "two")
    write_plan(out, make_plan("b" * 64), "three", force=True)
    assert entry.read_bytes() == b"\x7fELF" and (out / "report.md").read_text() == "three"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]  # no old copy left
