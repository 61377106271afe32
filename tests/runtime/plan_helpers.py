"""Shared by the rank-loading tests: compiled tiny plans, and the dp2-ep2 plan over a checkpoint."""

from pathlib import Path

from deepinfer.artifacts.plan_dir import write_plan
from deepinfer.planner.compile import compile_plan
from deepinfer.planner.report import render_report
from deepinfer.planner.topology_schema import load_topology
from deepinfer.runtime.plan_loader import load_runtime_plan
from deepinfer.runtime.weights import write_checkpoint

DP2_YAML = "builtin:tiny-cpu-dp2-ep2"


def compile_to(tmp_dir: Path, topology: str):
    """``topology`` compiled into ``tmp_dir/plan``, loaded as a RuntimePlan."""
    p = compile_plan(load_topology(topology))
    write_plan(tmp_dir / "plan", p, render_report(p), force=False)
    return load_runtime_plan(tmp_dir / "plan")


def dp2_checkpoint_plan(root: Path):
    """The dp2-ep2 topology over a checkpoint written to ``root/ckpt`` (seed 0, the synthetic
    weights' values) -> (RuntimePlan, checkpoint directory)."""
    ckpt = write_checkpoint("builtin:tiny", root / "ckpt", seed=0)
    yaml = Path(load_topology(DP2_YAML).base_dir) / f"{DP2_YAML.removeprefix('builtin:')}.yaml"
    yaml = yaml.read_text().replace("path: builtin:tiny", f"path: {ckpt}") \
        .replace("weights: synthetic", "weights: auto")
    (root / "topology.yaml").write_text(yaml)
    return compile_to(root, str(root / "topology.yaml")), ckpt


def tiny_plans(tmp_path_factory) -> dict:
    """The tiny-cpu and tiny-cpu-dp2-ep2 built-ins compiled, by name."""
    return {name: compile_to(tmp_path_factory.mktemp(name), f"builtin:{name}")
            for name in ("tiny-cpu", "tiny-cpu-dp2-ep2")}
