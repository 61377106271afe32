"""plan_kernel_choice: reference on CPU; triton where the capability table (or the registry)
says so on SM90/SM100, reference with a warning elsewhere; never imports triton."""

import re
import sys
from pathlib import Path

import pytest

from deepinfer.artifacts.model_spec import load_model_spec
from deepinfer.kernels import registry
from deepinfer.planner.passes import kernel_choice
from deepinfer.planner.passes.kernel_choice import TRITON_CAPABILITIES, plan_kernel_choice
from deepinfer.planner.topology import HardwareSection, ModelSection, Topology

TINY = load_model_spec("builtin:tiny")


def topo(device="cpu", sm_arch=0) -> Topology:
    return Topology(model=ModelSection("builtin:tiny"),
                    hardware=HardwareSection(device=device, sm_arch=sm_arch))


def test_cpu_is_all_reference():
    plan = plan_kernel_choice(TINY, topo())
    assert sorted(plan["backend_by_op"]) == registry.ops()
    assert set(plan["backend_by_op"].values()) == {"reference"}
    assert plan["warnings"] == []


@pytest.mark.parametrize("arch", [90, 100])
def test_hopper_and_blackwell_use_triton_where_covered(arch):
    plan = plan_kernel_choice(TINY, topo("h200", arch))
    for op, backend in plan["backend_by_op"].items():
        if op in TRITON_CAPABILITIES:
            assert (backend, plan["source_by_op"][op]) == ("triton", "static_table")
        else:
            assert (backend, plan["source_by_op"][op]) == ("reference", "fallback")
    fallbacks = [op for op, b in plan["backend_by_op"].items() if b == "reference"]
    assert len(plan["warnings"]) == len(fallbacks) > 0
    assert all(op in w for op, w in zip(fallbacks, plan["warnings"], strict=True))
    assert set(TRITON_CAPABILITIES) <= set(registry.ops())  # the table names real ops


def test_capability_table_names_triton_kernels():
    """Every op of the static table is defined in kernels/triton/ (read as text: no triton)."""
    triton_dir = Path(registry.__file__).parent / "triton"
    source = "\n".join(p.read_text() for p in sorted(triton_dir.glob("*.py")))
    for op in TRITON_CAPABILITIES:
        assert re.search(rf"^def {op}\(", source, re.M), f"{op} has no kernel in {triton_dir}"


def test_other_arch_falls_back_everywhere():
    plan = plan_kernel_choice(TINY, topo("custom", 80))
    assert set(plan["backend_by_op"].values()) == {"reference"}
    assert len(plan["warnings"]) == len(registry.ops())


def test_registered_backends_do_not_change_the_plan(monkeypatch):
    """What modules happen to have registered in this process must not change a plan."""
    before = plan_kernel_choice(TINY, topo("h200", 90))
    monkeypatch.setattr(kernel_choice.registry, "available_backends",
                        lambda op: ["triton", "reference"])
    assert plan_kernel_choice(TINY, topo("h200", 90)) == before


def test_planning_does_not_import_triton():
    if "deepinfer.kernels.triton" in sys.modules:
        pytest.skip("another test of this session imported the triton backend")
    plan_kernel_choice(TINY, topo("h200", 90))
    assert "deepinfer.kernels.triton" not in sys.modules


def test_deterministic():
    assert plan_kernel_choice(TINY, topo("h200", 90)) == plan_kernel_choice(TINY, topo("h200", 90))
