"""Golden plans: every built-in topology compiles to exactly the stored plan (small plans) or the
stored digest and stable keys (big plans). A difference is either a bug or a deliberate change;
for the latter regenerate with ``python -m tests.planner.regen_golden NAME`` (see that module)."""

import json

import pytest
from regen_golden import GOLDEN_DIR, digest, golden_files, golden_plan

from deepinfer.artifacts.plan_dir import plan_json_bytes
from deepinfer.planner.topology_schema import builtin_topology_names

NAMES = builtin_topology_names()
REGEN = "if the change is deliberate: python -m tests.planner.regen_golden {name}"


@pytest.mark.parametrize("name", NAMES)
def test_plan_matches_golden(name):
    plan = golden_plan(name)
    expected = golden_files(name, plan)
    (path, _), = expected.items()
    if not path.exists():
        pytest.fail(f"no golden file {path.name}; {REGEN.format(name=name)}")
    if path.name.endswith(".plan.json"):
        stored = json.loads(path.read_text())
        actual = json.loads(plan_json_bytes(plan))
        changed = sorted(k for k in set(stored) | set(actual) if actual.get(k) != stored.get(k))
        assert not changed, f"{name}: sections {changed} changed; {REGEN.format(name=name)}"
        assert path.read_bytes() == plan_json_bytes(plan), REGEN.format(name=name)
        return
    stored = json.loads(path.read_text())
    actual = json.loads(expected[path])
    for key, value in stored["stable"].items():
        assert actual["stable"].get(key) == value, (
            f"{name}: stable key {key} changed; {REGEN.format(name=name)}")
    changed = sorted(k for k in stored["sections_sha256"]
                     if actual["sections_sha256"].get(k) != stored["sections_sha256"][k])
    assert not changed, f"{name}: sections {changed} changed; {REGEN.format(name=name)}"
    assert actual == stored, REGEN.format(name=name)


def test_no_stale_golden_files():
    names = {p.name.split(".")[0] for p in GOLDEN_DIR.glob("*.json")}
    assert names <= set(NAMES), f"golden files without a built-in topology: {names - set(NAMES)}"


def test_digest_lists_every_stable_key():
    plan = golden_plan("tiny-cpu")
    d = digest(plan)
    assert d["plan_id"] == plan["plan_id"]
    assert d["stable"]["cache.num_blocks"] == plan["cache"]["num_blocks"]
    assert [lay["attention_mode"] for lay in plan["model"]["layers"]] == \
        d["stable"]["model.layers[*].attention_mode"]
