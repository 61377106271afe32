"""``compile_plan``: a parsed topology in, the ``plan.json`` object out.

Step 1 loads the inputs the topology points at (the model ``config.json``, the load statistics);
step 2 runs the passes of ``planner/passes/`` in dependency order (each a pure function of the
model spec, the topology and earlier results); step 3 assembles the plan with its identity:
``plan_id`` is the sha256 of the normalized inputs (the resolved topology, the model config's
content and the load statistics' content), so the same inputs always give the same id and the
same bytes. Writing the plan directory is ``artifacts.plan_dir.write_plan``'s job.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from deepinfer.artifacts.model_spec import ConfigError, ModelSpec
from deepinfer.artifacts.plan_dir import canonical_json
from deepinfer.artifacts.plan_schema import SCHEMA_VERSION
from deepinfer.planner.errors import TopologyError
from deepinfer.planner.topology import Topology
from deepinfer.planner.topology_schema import model_config_path, yaml_field

__all__ = ["compile_plan", "deepinfer_version", "load_model", "normalized_topology", "plan_id"]

HF_MODEL_TYPES = ("deepseek_v41",)  # model_type of a V4.1 HF config.json


def deepinfer_version() -> str:
    """The installed package version (recorded in every plan)."""
    try:
        return version("deepinfer")
    except PackageNotFoundError:
        return "unknown"


# ---- step 1: inputs ---------------------------------------------------------------------------
def load_model(topology: Topology) -> tuple[ModelSpec, dict[str, Any]]:
    """The ModelSpec and the raw ``config.json`` of ``topology.model.path``.

    Raises:
        TopologyError: field ``model.path``, when the config is missing, unreadable or does not
            describe a DeepSeek-V4.1 model (the message names the config file and its field).
    """
    path = model_config_path(topology.model.path)

    def fail(message: str) -> TopologyError:
        return TopologyError(topology.source, "model.path", f"{path}: {message}")

    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise fail("file not found (expected the model's config.json)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read the file ({exc})") from None
    except json.JSONDecodeError as exc:
        raise fail(f"not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise fail("expected a JSON object (a DeepSeek-V4.1 config.json)")
    model_type = raw.get("model_type")
    if "text_config" in raw and model_type not in HF_MODEL_TYPES:
        raise fail(f"field 'model_type': expected one of {', '.join(HF_MODEL_TYPES)} (a "
                   f"DeepSeek-V4.1 config), got {model_type!r}")
    try:
        spec = ModelSpec.from_dict(raw, source=str(path))
    except ConfigError as exc:
        raise TopologyError(topology.source, "model.path",
                            f"not a DeepSeek-V4.1 config: {exc}") from None
    return spec, raw


def _load_stats_digests(topology: Topology) -> dict[str, str | None]:
    """sha256 of each load-statistics file's bytes (None where the topology names none)."""
    digests: dict[str, str | None] = {}
    for name in ("load_stats", "decode_load_stats"):
        path = getattr(topology.eplb, name)
        if path is None:
            digests[name] = None
            continue
        try:
            digests[name] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError as exc:
            raise TopologyError(path, "load", f"cannot read the load statistics ({exc})") \
                from None
    return digests


def normalized_topology(topology: Topology) -> dict[str, Any]:
    """The resolved topology as plain data, as recorded in the plan (``base_dir`` dropped: every
    path in it is already absolute or ``builtin:``)."""
    data = dataclasses.asdict(topology)
    data.pop("base_dir")
    return data


def plan_id(topology: Topology, model_config: dict[str, Any]) -> str:
    """sha256 of the normalized inputs: the resolved topology (less where it was read from),
    the model config's content and the load statistics' content."""
    inputs = normalized_topology(topology)
    inputs.pop("source")
    identity = {
        "schema_version": SCHEMA_VERSION,
        "topology": inputs,
        "model_config": model_config,
        "load_stats_sha256": _load_stats_digests(topology),
    }
    return hashlib.sha256(canonical_json(identity).encode("utf-8")).hexdigest()


# ---- step 2: the passes -------------------------------------------------------------------------
def _run_passes(spec: ModelSpec, topo: Topology) -> dict[str, Any]:
    """Every pass, in dependency order; returns the plan sections they produce."""
    from deepinfer.planner.passes.cache_layout import plan_cache_layout
    from deepinfer.planner.passes.cost_model import plan_cost_model
    from deepinfer.planner.passes.expert_placement import plan_expert_placement
    from deepinfer.planner.passes.graph_buckets import plan_graph_buckets
    from deepinfer.planner.passes.kernel_choice import plan_kernel_choice
    from deepinfer.planner.passes.load_plan_templates import plan_load_templates
    from deepinfer.planner.passes.model_layers import plan_model_section
    from deepinfer.planner.passes.rank_groups import plan_rank_groups
    from deepinfer.planner.passes.shard_map import plan_weight_shards
    from deepinfer.planner.passes.validate import validate_topology

    # Phase 1: checks that need the model (the schema checked each field alone).
    warnings = list(validate_topology(spec, topo))
    # Phase 2: where things live.
    rank_groups = plan_rank_groups(topo)
    placement = plan_expert_placement(spec, topo)
    shards = plan_weight_shards(spec, topo, placement)
    # Phase 3: memory and shapes.
    cache = plan_cache_layout(spec, topo, shards["weight_bytes_per_rank"])
    buckets = plan_graph_buckets(spec, topo)
    kernels = plan_kernel_choice(spec, topo)
    templates = plan_load_templates(spec, cache)
    # Phase 4: what it will cost.
    cost = plan_cost_model(spec, topo, cache, placement)
    return {
        "model": plan_model_section(spec), "rank_groups": rank_groups,
        "expert_placement": placement, "weight_shards": shards, "cache": cache,
        "graph_buckets": buckets, "kernels": kernels, "load_plan_templates": templates,
        "cost_model": cost, "warnings": warnings,
    }


def _scheduler_limits(spec: ModelSpec, topo: Topology, cache: dict[str, Any]) -> dict[str, Any]:
    """The limits the C++ scheduler enforces; ``max_num_seqs`` is capped by the state slots
    (slot 0 is the sentinel), ``lookahead_tokens`` are the draft tokens a decode step appends."""
    s = topo.scheduler
    draft = topo.speculative.num_draft_tokens if topo.speculative.method == "dspark" else 0
    return {
        "mode": s.mode,
        "requested_max_num_seqs": s.max_num_seqs,
        "max_num_seqs": min(s.max_num_seqs, cache["num_state_slots"] - 1),
        "max_num_batched_tokens": s.max_num_batched_tokens,
        "prefill_chunk_size_tokens": s.prefill_chunk_size_tokens,
        "prefill_watermark": s.prefill_watermark,
        "vote_interval_steps": s.vote_interval_steps,
        "lookahead_tokens": draft,
        "max_model_len_tokens": topo.cache.max_model_len_tokens or spec.max_position_embeddings,
        "block_size_tokens": topo.cache.block_size_tokens,
        "num_blocks": cache["num_blocks"],
        "num_state_slots": cache["num_state_slots"],
    }


# ---- step 3: the plan -------------------------------------------------------------------------
def compile_plan(topology: Topology) -> dict[str, Any]:
    """The ``plan.json`` object for ``topology`` (keys: ``docs/plan_format.md``).

    Raises:
        TopologyError: an input the planner cannot plan from; the field is the topology.yaml
            key (``hardware.memory_gib``), or ``load`` for a load-statistics file.
    """
    spec, raw_config = load_model(topology)
    try:
        sections = _run_passes(spec, topology)
    except TopologyError as exc:
        if exc.source != topology.source:
            raise
        raise TopologyError(exc.source, yaml_field(exc.field), exc.message) from None
    limits = _scheduler_limits(spec, topology, sections["cache"])
    warnings = sections.pop("warnings")
    for name in ("weight_shards", "kernels", "cache", "cost_model", "load_plan_templates"):
        warnings += [w for w in sections[name].get("warnings", ()) if w not in warnings]
    if limits["max_num_seqs"] < limits["requested_max_num_seqs"]:
        warnings.append(f"scheduler.max_num_seqs {limits['requested_max_num_seqs']} lowered to "
                        f"{limits['max_num_seqs']}: the cache has room for "
                        f"{limits['num_state_slots'] - 1} sequence state slots")
    return {
        "schema_version": SCHEMA_VERSION,
        "deepinfer_version": deepinfer_version(),
        "plan_id": plan_id(topology, raw_config),
        "topology": normalized_topology(topology),
        **sections,
        "scheduler": limits,
        "warnings": warnings,
    }
