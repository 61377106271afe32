"""One rank's model, with the weights the plan's shard map (``weight_shards``) gives it.

  Step 1  assignments (plan data only): which checkpoint tensor fills which parameter of this
          rank's model. ``rules`` classify every name of the tensor table (first ``fnmatch``
          match, as the planner recorded them): ``replicated`` by name; ``expert`` only through
          the rank's ``expert_slots`` ``[layer, slot, logical]`` — slot
          ``layers.L.ffn.experts.{slot - first slot}.*`` <- ``layers.L.ffn.experts.{logical}.*``
          (a logical expert may fill several slots; the slots are one MXFP4 stack per
          projection, ``runtime/model/expert_slots.py``); ``engram_rows`` when the rank's row
          range is the whole table (row-sharded engram is not supported yet: PlanError naming
          the field); ``skipped`` not at all.
  Step 2  coverage, before any tensor data is read: every parameter of the rank's model (built
          on the meta device, MoE reduced to the rank's slots) is assigned exactly once (a
          ``.scale`` travels with its weight), and every source tensor (with its ``.scale``) is
          in the checkpoint with the table's dtype and shape. All problems are reported together
          in one CheckpointError.
  Step 3  read (checkpoint directory) or generate (``weights: synthetic``: each tensor from
          its own seeded generator, the same values as the full synthetic checkpoint) only
          those tensors, check their scales, and assign them into place as stored (FP8 codes +
          scales, MXFP4 expert stacks; nothing is dequantized).

A single-rank plan takes the same path with every slot. The MoE routes with the placement the
weights follow (``weight_shards.expert_phase``) in both phases: when the planner's decode
placement differs (it warns), decode still gives the right tokens, only not its planned balance.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.artifacts.plan_schema import PlanError
from deepinfer.artifacts.weight_names import SCALE_KINDS, TensorSpec, expected_tensors
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41
from deepinfer.runtime.model.moe import TokenExchange
from deepinfer.runtime.model_loader import LoadedModel, build_model, engram_token_map
from deepinfer.runtime.plan_loader import RuntimePlan
from deepinfer.runtime.tokenizer import load_tokenizer
from deepinfer.runtime.weights import shards
from deepinfer.runtime.weights.dequant import check_scales
from deepinfer.runtime.weights.errors import CheckpointError
from deepinfer.runtime.weights.shards import INDEX_FILE, TORCH_TO_SAFETENSORS
from deepinfer.runtime.weights.synthetic import (
    MAX_SYNTHETIC_BYTES,
    describe_spec,
    synthetic_tensors,
)

__all__ = ["RankShard", "load_rank_model", "rank_shard"]

REPLICATED, EXPERT, ENGRAM_ROWS, SKIPPED = "replicated", "expert", "engram_rows", "skipped"


@dataclass(frozen=True)
class RankShard:
    """What one rank loads.

    Attributes:
        targets: model parameter name -> checkpoint base name (no ``.scale``), in table order.
        sources: every checkpoint tensor to read (weights and their scales), by name.
        slot_offset: physical slot id of ``experts[0]`` in every MoE layer.
        slot_logical: per backbone layer, the logical expert of each local slot.
    """

    targets: dict[str, str]
    sources: dict[str, TensorSpec]
    slot_offset: int
    slot_logical: list[list[int]]


def rank_shard(plan: RuntimePlan, rank: int) -> RankShard:
    """Step 1: the assignments of ``rank`` (PlanError naming the field on inconsistent data)."""
    spec, ws = plan.spec, plan.plan["weight_shards"]
    field = f"weight_shards.ranks[{rank}]"
    ranks = ws["ranks"]
    if not 0 <= rank < len(ranks) or ranks[rank]["rank"] != rank:
        raise PlanError(plan.source, "weight_shards.ranks", f"no entry for rank {rank}")
    entry = ranks[rank]
    if entry.get("dspark_expert_slots"):
        raise PlanError(plan.source, f"{field}.dspark_expert_slots",
                        "DSpark stages are not supported by the runtime yet; compile with "
                        "speculative.method: none")
    slot_offset, slot_logical = _slots(plan, entry, field)
    table = expected_tensors(spec, include_dspark=False)
    _check_whole_engram(plan, entry, field)  # so engram tables load like replicated ones
    targets: dict[str, str] = {}
    for name, t in table.items():
        if t.kind in SCALE_KINDS or not t.is_backbone:
            continue  # a scale travels with its weight
        if classify(name, ws["rules"]) in (REPLICATED, ENGRAM_ROWS):
            targets[name] = name
    for layer, logical in enumerate(slot_logical):
        for j, e in enumerate(logical):
            for w in ("w1", "w2", "w3"):
                targets[f"layers.{layer}.ffn.experts.{j}.{w}.weight"] = \
                    f"layers.{layer}.ffn.experts.{e}.{w}.weight"
    sources: dict[str, TensorSpec] = {}
    for src in targets.values():
        t = table[src]
        sources[src] = t
        if t.scale_name is not None:
            sources[t.scale_name] = table[t.scale_name]
    return RankShard(targets, sources, slot_offset, slot_logical)


def classify(name: str, rules: list[list[str]]) -> str:
    """The class of the first ``[pattern, class]`` rule matching ``name`` (``*`` matches dots)."""
    for pattern, cls in rules:
        if fnmatch.fnmatchcase(name, pattern):
            return cls
    raise PlanError("plan.json", "weight_shards.rules", f"no rule matches tensor {name}")


def _slots(plan: RuntimePlan, entry: dict[str, Any], field: str) -> tuple[int, list[list[int]]]:
    """(first physical slot, per layer the logical expert of each local slot), checked against
    ``expert_placement`` so that routing (log2phy) and the loaded weights agree."""
    ws = plan.plan["weight_shards"]
    k = int(ws["slots_per_rank"])
    offset = int(entry["ep_rank"]) * k
    phy2log = plan.plan["expert_placement"][ws["expert_phase"]]["phy2log"]
    num_layers = plan.spec.num_hidden_layers
    logical: list[list[int | None]] = [[None] * k for _ in range(num_layers)]
    for layer, slot, e in entry["expert_slots"]:
        j = slot - offset
        if not (0 <= layer < num_layers and 0 <= j < k):
            raise PlanError(plan.source, f"{field}.expert_slots",
                            f"[{layer}, {slot}, {e}] is outside layers [0, {num_layers}) or this "
                            f"rank's slots [{offset}, {offset + k})")
        if logical[layer][j] is not None:
            raise PlanError(plan.source, f"{field}.expert_slots",
                            f"layer {layer} slot {slot} is listed twice")
        if phy2log[layer][slot] != e:
            raise PlanError(plan.source, f"{field}.expert_slots",
                            f"layer {layer} slot {slot} holds expert {e}, but expert_placement."
                            f"{ws['expert_phase']}.phy2log says {phy2log[layer][slot]}")
        logical[layer][j] = e
    for layer, row in enumerate(logical):
        if None in row:
            raise PlanError(plan.source, f"{field}.expert_slots",
                            f"layer {layer}: slot {offset + row.index(None)} has no expert")
    return offset, [[int(e) for e in row] for row in logical]  # type: ignore[arg-type]


def _check_whole_engram(plan: RuntimePlan, entry: dict[str, Any], field: str) -> None:
    spec = plan.spec
    rows = dict(zip(spec.engram_layer_ids, spec.engram_num_embeddings, strict=True))
    for layer, begin, end in entry["engram_rows"]:
        if (begin, end) != (0, rows.get(layer)):
            raise PlanError(plan.source, f"{field}.engram_rows",
                            f"layer {layer}: rows [{begin}, {end}) of {rows.get(layer)}; "
                            "row-sharded engram tables are not supported by the runtime yet "
                            "(compile with parallel.engram: 1)")


# ---------------------------------------------------------------------------------------------
# Steps 2 and 3
# ---------------------------------------------------------------------------------------------


def load_rank_model(plan: RuntimePlan, rank: int, kernels: KernelSet | None = None,
                    exchange: TokenExchange | None = None, seed: int = 0) -> LoadedModel:
    """Spec, tokenizer and ``rank``'s model with its weights in place (module docstring).

    ``exchange``: the EP group's token exchange (None for an EP group of one rank).
    Raises CheckpointError (every coverage problem, before any data is read) or PlanError.
    """
    model_path = plan.model_path
    spec = plan.spec
    tok = load_tokenizer(model_path)
    token_map = engram_token_map(spec, tok) if spec.engram_layer_ids else None
    shard = rank_shard(plan, rank)
    placement = plan.plan["expert_placement"][plan.plan["weight_shards"]["expert_phase"]]
    net = build_model(spec, kernels, token_map)
    for block in net.layers:
        layer = block.attn.layer.layer_id
        block.ffn.set_slots(shard.slot_offset, shard.slot_logical[layer],
                            placement["log2phy"][layer], placement["logcnt"][layer], exchange)
    synthetic = plan.weights == "synthetic" or model_path.startswith("builtin:")
    problems = _model_coverage(net, shard)
    if not synthetic:
        problems += _checkpoint_coverage(Path(model_path), shard)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        where = "synthetic weights" if synthetic else f"checkpoint {model_path}"
        raise CheckpointError(f"{where} cannot fill rank {rank}'s model; {len(problems)} "
                              f"problem(s):\n{lines}", problems)
    stored = _synthetic(shard, spec, seed) if synthetic else _read(Path(model_path), shard)
    try:
        check_scales(stored, shard.sources.values())
    except ValueError as exc:  # a corrupt scale, named by check_scales
        raise CheckpointError(f"checkpoint {model_path}: {exc}") from None
    net.load_state_dict(_state(shard, stored), strict=True, assign=True)
    return LoadedModel(spec, tok, net)


def _state(shard: RankShard, stored: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's state dict: each target's source tensor, and its ``.scale`` when stored
    quantized (a logical expert's tensors go to every slot holding a copy of it)."""
    state: dict[str, torch.Tensor] = {}
    for target, src in shard.targets.items():
        state[target] = stored[src]
        scale_name = shard.sources[src].scale_name
        if scale_name is not None:
            state[target.removesuffix(".weight") + ".scale"] = stored[scale_name]
    return state


def _model_coverage(net: DeepseekV41, shard: RankShard) -> list[str]:
    """Every parameter (and persistent buffer) of ``net`` assigned exactly once; the model's
    ``.scale`` entries come with their weights (``_state``)."""
    params = {n for n in net.state_dict(keep_vars=True) if not n.endswith(".scale")}
    problems = [f"parameter {n} of the rank's model gets no tensor from the shard map"
                for n in sorted(params - set(shard.targets))]
    problems += [f"the shard map assigns {n}, which the rank's model does not have"
                 for n in sorted(set(shard.targets) - params)]
    return problems


def _checkpoint_coverage(ckpt_dir: Path, shard: RankShard) -> list[str]:
    """Index and shard headers only: each source tensor present with its dtype and shape."""
    index = ckpt_dir / INDEX_FILE
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{index}: unreadable checkpoint index ({exc})"]
    problems: list[str] = []
    headers: dict[str, dict[str, shards.ShardEntry] | None] = {}
    for name, t in shard.sources.items():
        shard_name = weight_map.get(name)
        if shard_name is None:
            problems.append(f"missing tensor {name} (expected "
                            f"{TORCH_TO_SAFETENSORS[t.dtype]} {list(t.shape)})")
            continue
        if shard_name not in headers:
            path = ckpt_dir / shard_name
            if Path(shard_name).name != shard_name or not path.is_file():
                problems.append(f"shard {shard_name} (holding {name}) does not exist in "
                                f"{ckpt_dir}")
                headers[shard_name] = None
            else:
                entries, shard_problems = shards.read_shard_header(path)
                problems += shard_problems
                headers[shard_name] = None if shard_problems else entries
        entries = headers[shard_name]
        if entries is None:
            continue
        entry = entries.get(name)
        if entry is None:
            problems.append(f"tensor {name}: the index maps it to {shard_name}, which does not "
                            "contain it")
        elif (entry.dtype, entry.shape) != (TORCH_TO_SAFETENSORS[t.dtype], t.shape):
            problems.append(f"tensor {name}: {entry.dtype} {list(entry.shape)} in {shard_name},"
                            f" expected {TORCH_TO_SAFETENSORS[t.dtype]} {list(t.shape)}")
    return problems


def _read(ckpt_dir: Path, shard: RankShard) -> dict[str, torch.Tensor]:
    weight_map = json.loads((ckpt_dir / INDEX_FILE).read_text())["weight_map"]
    by_shard: dict[str, list[str]] = {}
    for name in shard.sources:
        by_shard.setdefault(weight_map[name], []).append(name)
    stored: dict[str, torch.Tensor] = {}
    for shard_name, names in by_shard.items():
        stored.update(shards.load_tensors(ckpt_dir / shard_name, names))
    return stored


def _synthetic(shard: RankShard, spec: ModelSpec, seed: int) -> dict[str, torch.Tensor]:
    """The source tensors as the full synthetic checkpoint holds them (each tensor's values
    depend only on ``(seed, name)``)."""
    total = sum(t.num_bytes for t in shard.sources.values())
    if total > MAX_SYNTHETIC_BYTES:
        raise ValueError(f"refusing to synthesize {total / 2**30:.1f} GiB of weights for one rank "
                         f"of {describe_spec(spec)} (limit {MAX_SYNTHETIC_BYTES / 2**30:.0f} GiB)")
    return synthetic_tensors(shard.sources.values(), seed)
