"""Expert placement for the plan: EPLB over measured (or uniform) expert loads, per phase.

Prefill and decode route tokens differently (long prompts vs one token per sequence), so each
phase gets its own placement from its own statistics (``eplb.load_stats`` for prefill,
``eplb.decode_load_stats`` for decode, falling back to the prefill file, then to uniform load).
The placement covers one EP group; every EP group (a contiguous run of ``ep`` ranks) holds the
same slots. ``num_nodes`` given to EPLB is the number of nodes one EP group spans, so the
hierarchical policy packs expert groups onto nodes only when the group really crosses nodes;
``place_experts`` picks hierarchical when the expert groups divide by those nodes, else global.

DSpark stages have their own 128 experts; with no statistics for them they are placed from
uniform load (key ``dspark``), their slot count rounded up to a multiple of ``ep``.

Load-statistics file format: ``{"load": [[tokens per logical expert] per backbone MoE layer]}``
(every backbone layer of V4.1 is an MoE layer); a relative path is resolved against
``topo.base_dir``. Any problem with a file is a ``TopologyError(path, "load", ...)``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.planner.errors import TopologyError
from deepinfer.planner.passes.place_experts import ExpertPlacement, place_experts, uniform_load
from deepinfer.planner.passes.shard_map import dspark_num_slots
from deepinfer.planner.topology import Topology

__all__ = ["ep_num_nodes", "load_stats_file", "plan_expert_placement"]


def ep_num_nodes(topo: Topology) -> int:
    """Nodes one EP group spans (1 when the group fits in a node)."""
    return max(1, topo.parallel.ep // max(topo.hardware.gpus_per_node, 1))


def load_stats_file(path: str, base_dir: str, num_layers: int, num_experts: int) -> torch.Tensor:
    """Read a load-statistics JSON into a ``[num_layers, num_experts]`` float64 tensor.

    Raises ``TopologyError(path, "load", ...)`` for an unreadable file, bad JSON, a missing
    ``load`` key, the wrong shape or a negative / non-finite / non-numeric entry.
    """
    full = Path(path) if Path(path).is_absolute() else Path(base_dir) / path
    src = str(full)
    try:
        raw = json.loads(full.read_text())
    except OSError as exc:
        raise TopologyError(src, "load", f"cannot read the load statistics ({exc.strerror or exc})"
                            ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TopologyError(src, "load", f"not valid JSON ({exc})") from None
    if not isinstance(raw, dict) or "load" not in raw:
        raise TopologyError(src, "load", 'expected an object {"load": [[tokens per expert] per '
                            'MoE layer]}')
    rows = raw["load"]
    if not isinstance(rows, list) or len(rows) != num_layers:
        got = len(rows) if isinstance(rows, list) else type(rows).__name__
        raise TopologyError(src, "load", f"expected {num_layers} rows (one per backbone MoE "
                            f"layer), got {got}")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != num_experts:
            got = len(row) if isinstance(row, list) else type(row).__name__
            raise TopologyError(src, "load", f"row {i}: expected {num_experts} entries (one per "
                                f"routed expert), got {got}")
        for j, v in enumerate(row):
            if (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
                    or v < 0):
                raise TopologyError(src, "load", f"row {i}, expert {j}: expected a finite "
                                    f"non-negative number, got {v!r}")
    return torch.tensor(rows, dtype=torch.float64)


def _as_dict(p: ExpertPlacement) -> dict:
    return {"phy2log": p.phy2log.tolist(), "log2phy": p.log2phy.tolist(),
            "logcnt": p.logcnt.tolist()}


def plan_expert_placement(spec: ModelSpec, topo: Topology) -> dict:
    """Returns ``{"prefill": {"phy2log", "log2phy", "logcnt"}, "decode": {...}, "policy",
    "num_logical_experts", "num_physical_experts", "experts_per_rank", "num_groups",
    "num_nodes", "num_gpus", "load_sources": {"prefill": path|"uniform", "decode": ...},
    "dspark": {... same keys for the DSpark stages ...} (only for a model with stages)}``.
    """
    e = topo.eplb
    ep = topo.parallel.ep
    num_layers, num_experts = spec.num_hidden_layers, spec.n_routed_experts
    num_physical = num_experts + e.redundant_experts
    num_groups = e.expert_groups or 1
    num_nodes = ep_num_nodes(topo)

    def load_for(path: str | None) -> torch.Tensor:
        if path is None:
            return uniform_load(num_layers, num_experts)
        return load_stats_file(path, topo.base_dir, num_layers, num_experts)

    def place(load: torch.Tensor) -> ExpertPlacement:
        try:
            return place_experts(load, num_replicas=num_physical, num_groups=num_groups,
                                 num_nodes=num_nodes, num_gpus=ep)
        except ValueError as exc:  # validate_topology should have caught it; name the section
            raise TopologyError(topo.source, "eplb", f"expert placement impossible: {exc}"
                                ) from None

    decode_path = e.decode_load_stats or e.load_stats
    prefill = place(load_for(e.load_stats))
    decode = prefill if decode_path == e.load_stats else place(load_for(decode_path))
    result = {
        "prefill": _as_dict(prefill),
        "decode": _as_dict(decode),
        "policy": prefill.policy,
        "num_logical_experts": num_experts,
        "num_physical_experts": num_physical,
        "experts_per_rank": num_physical // ep,
        "num_groups": num_groups,
        "num_nodes": num_nodes,
        "num_gpus": ep,
        "load_sources": {"prefill": e.load_stats or "uniform", "decode": decode_path or "uniform"},
    }
    if spec.num_nextn_predict_layers:
        slots = dspark_num_slots(spec, ep)
        d = place_experts(uniform_load(spec.num_nextn_predict_layers, spec.dspark_n_routed_experts),
                          num_replicas=slots, num_groups=1, num_nodes=1, num_gpus=ep)
        result["dspark"] = dict(_as_dict(d), policy=d.policy,
                                num_logical_experts=spec.dspark_n_routed_experts,
                                num_physical_experts=slots, experts_per_rank=slots // ep)
    return result
