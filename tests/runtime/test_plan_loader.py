"""The runtime's plan checks: each refusal names plan.json and the plan field."""

import json

import pytest

from deepinfer.artifacts.plan_dir import write_plan
from deepinfer.artifacts.plan_schema import PlanError
from deepinfer.planner.compile import compile_plan
from deepinfer.planner.report import render_report
from deepinfer.planner.topology_schema import load_topology
from deepinfer.runtime.plan_loader import load_runtime_plan


def compiled(tmp_path, name, edit=None):
    plan = compile_plan(load_topology(f"builtin:{name}"))
    if edit is not None:
        edit(plan)
    out = tmp_path / name
    write_plan(out, plan, render_report(plan), force=True)
    return out


def test_tiny_plan_loads(tmp_path):
    rp = load_runtime_plan(compiled(tmp_path, "tiny-cpu"))
    assert rp.device == "cpu" and rp.spec.num_hidden_layers == len(rp.plan["model"]["layers"])
    assert rp.kernels and set(rp.kernels.values()) == {"reference"}


@pytest.mark.parametrize("edit, field", [
    (lambda p: p.update(deepinfer_version="0.0.1"), "deepinfer_version"),
    (lambda p: p["model"]["layers"][1].update(attention_mode="reuse"), "model.layers"),
])
def test_mismatches_name_the_field(tmp_path, edit, field):
    with pytest.raises(PlanError, match=field):
        load_runtime_plan(compiled(tmp_path, "tiny-cpu", edit))


def test_gpu_plan_on_a_machine_without_that_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(PlanError, match="topology.hardware.device"):
        load_runtime_plan(compiled(tmp_path, "v41-flash-slice-h200"))


def test_modified_plan_is_refused(tmp_path):
    out = compiled(tmp_path, "tiny-cpu")
    plan = json.loads((out / "plan.json").read_text())
    plan["scheduler"]["num_blocks"] += 1
    (out / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(PlanError, match="plan.json"):
        load_runtime_plan(out)
