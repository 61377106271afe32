"""Load a plan directory for the runtime and check that this machine can replay it.

The runtime never re-decides what the plan decided; it only verifies. ``read_plan`` (artifacts)
checks the manifest, the schema version and the required keys; this module adds what depends on
the running process: the installed deepinfer version, the model config the plan was compiled
from, the device kind, and whether the device's free memory covers the planned cache. Every
failure is a :class:`PlanError` naming ``plan.json`` and the plan field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from deepinfer.artifacts.model_spec import ConfigError, ModelSpec, load_model_spec
from deepinfer.artifacts.plan_dir import read_plan
from deepinfer.artifacts.plan_schema import PLAN_FILE, PlanError

__all__ = ["RuntimePlan", "load_runtime_plan"]


@dataclass(frozen=True)
class RuntimePlan:
    """What the engine reads of a verified plan.

    Attributes:
        plan: the whole ``plan.json`` object.
        spec: the model, from the config the plan names (checked against the plan's layers).
        device: ``cpu`` or ``cuda``.
    """

    plan: dict[str, Any]
    source: str
    spec: ModelSpec
    device: str

    @property
    def model_path(self) -> str:
        return self.plan["topology"]["model"]["path"]

    @property
    def weights(self) -> str:
        return self.plan["topology"]["model"]["weights"]

    @property
    def scheduler(self) -> dict[str, Any]:
        return self.plan["scheduler"]

    @property
    def kernels(self) -> dict[str, str]:
        """op -> backend as the plan chose it."""
        return dict(self.plan["kernels"]["backend_by_op"])

    @property
    def decode_buckets(self) -> list[int]:
        return list(self.plan["graph_buckets"]["decode"])

    @property
    def prefill_token_buckets(self) -> list[int]:
        return list(self.plan["graph_buckets"]["prefill_tokens"])

    @property
    def prefill_bf16_weights(self) -> bool:
        """Whether the plan made room for the FP8 projections' bf16 twins (the prefill GEMMs'
        ``linear_ss``; ``cache.prefill_bf16_weights``)."""
        return bool(self.plan["cache"].get("prefill_bf16_weights", {}).get("enabled", False))


def load_runtime_plan(plan_dir: str | Path) -> RuntimePlan:
    """Verify ``plan_dir`` for this process (see the module docstring) and return it."""
    plan = read_plan(plan_dir)
    installed_version = _installed_version()
    source = str(Path(plan_dir) / PLAN_FILE)
    if plan["deepinfer_version"] != installed_version:
        raise PlanError(source, "deepinfer_version",
                        f"the plan was compiled by deepinfer {plan['deepinfer_version']} but "
                        f"{installed_version} is installed; recompile with deepinfer-compile")
    spec = _model_spec(plan, source)
    device = _check_hardware(plan, source)
    return RuntimePlan(plan, source, spec, device)


def _installed_version() -> str:
    try:
        return version("deepinfer")
    except PackageNotFoundError:
        return "unknown"


def _model_spec(plan: dict[str, Any], source: str) -> ModelSpec:
    path = plan["topology"]["model"]["path"]
    try:
        spec = load_model_spec(path)
    except (ConfigError, OSError) as exc:
        raise PlanError(source, "topology.model.path", f"cannot load the model config: {exc}") \
            from None
    planned = [(lay["index"], lay["compress_ratio"], lay["attention_mode"])
               for lay in plan["model"]["layers"]]
    actual = [(lay.layer_id, lay.compress_ratio, lay.mode) for lay in spec.backbone_layers]
    if planned != actual:
        raise PlanError(source, "model.layers",
                        f"the model config at {path} no longer matches the plan's layer table "
                        "(the config changed since compiling); recompile with deepinfer-compile")
    return spec


def _check_hardware(plan: dict[str, Any], source: str) -> str:
    """``cpu`` or ``cuda`` after checking the device kind and its free memory."""
    hardware = plan["topology"]["hardware"]
    if hardware["device"] == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        raise PlanError(source, "topology.hardware.device",
                        f"the plan is for {hardware['device']} GPUs but no CUDA device is "
                        "visible; compile a plan for this machine (hardware.device: cpu)")
    name = torch.cuda.get_device_name()
    kind = hardware["device"].lower()
    if kind != "custom" and not re.search(rf"\b{re.escape(kind)}\b", name.lower()):
        raise PlanError(source, "topology.hardware.device",
                        f"the plan is for {hardware['device']} but this GPU is {name}; compile "
                        "a plan for this machine")
    free_bytes, _ = torch.cuda.mem_get_info()
    cache = plan["cache"]
    needed = cache["num_blocks"] * cache["block_bytes"] + \
        cache["num_state_slots"] * cache["state_slot_bytes"]
    twins = cache.get("prefill_bf16_weights", {}).get("bytes_per_rank", 0)
    if free_bytes < needed + twins:
        raise PlanError(source, "cache.num_blocks",
                        f"the planned cache needs {needed / 2**30:.2f} GiB"
                        + (f" and the prefill bf16 weights {twins / 2**30:.2f} GiB" if twins
                           else "")
                        + f" but the GPU has {free_bytes / 2**30:.2f} GiB free")
    return "cuda"
