"""Weight shard map: which checkpoint tensors each rank loads, and how many bytes that is.

Every rank loads the dense tensors (attention, norms, mHC, router, shared experts, embedding,
head) in full: they are small next to the routed experts and every token needs them. Routed
experts are split by expert parallelism: rank ``r`` with EP rank ``e`` holds the physical slots
``[e * k, (e + 1) * k)`` of every MoE layer, ``k = (experts + redundant) / ep``, and each slot is
a copy of the logical expert the placement puts there. The engram tables (two 384M-row FP8
tables in the released model, 189 GiB) are split by rows over the ``parallel.engram`` ranks of
an engram group. DSpark stages (``mtp.*``) are loaded only when ``speculative.method`` is
``dspark``; their experts are split like the backbone's.

Which class a tensor belongs to is given by first-match ``fnmatch`` rules over the names of
``artifacts/weight_names.py``, recorded in the plan as data: ``plan.json`` stays small (rules
plus per-rank slot lists, never the 95,819 names per rank) and the runtime applies the same
rules to the same table. Byte counts are exact on-disk sizes (FP8 weights + their ue8m0 scale
tiles, FP4 experts packed two per byte + one scale per 32, engram rows + one scale per 32).
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from functools import lru_cache

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.artifacts.weight_names import (
    IMAGE_EMBEDDING_NAMES,
    KIND_BF16,
    KIND_F32,
    KIND_FP8,
    expected_tensors,
)
from deepinfer.planner.topology import Topology

__all__ = ["plan_weight_shards", "shard_rules", "weight_bytes_per_rank", "weight_summary"]

# Tensor classes of the rules.
REPLICATED = "replicated"  # every rank loads the whole tensor
EXPERT = "expert"  # routed backbone expert: ranks load the slots the placement gives them
ENGRAM_ROWS = "engram_rows"  # engram table (and its scale): ranks load a contiguous row range
DSPARK_EXPERT = "dspark_expert"  # routed DSpark expert, split like EXPERT
SKIPPED = "skipped"  # not loaded (vision tower, aligner, image embeddings, unused DSpark)

_EXPERT_RE = re.compile(r"^(layers|mtp)\.(\d+)\.ffn\.experts\.(\d+)\.")
_ENGRAM_TABLE_RE = re.compile(r"^layers\.(\d+)\.engram\.embed\.")


def shard_rules(dspark_enabled: bool) -> list[list[str]]:
    """First-match ``[pattern, class]`` rules over checkpoint tensor names (``fnmatch``; ``*``
    also matches dots)."""
    dspark = DSPARK_EXPERT if dspark_enabled else SKIPPED
    rules = [["vision.*", SKIPPED], ["aligner.*", SKIPPED]]
    rules += [[name + "*", SKIPPED] for name in IMAGE_EMBEDDING_NAMES]
    rules += [
        ["layers.*.ffn.experts.*", EXPERT],
        ["layers.*.engram.embed.*", ENGRAM_ROWS],
        ["mtp.*.ffn.experts.*", dspark],
        ["mtp.*", REPLICATED if dspark_enabled else SKIPPED],
        ["*", REPLICATED],
    ]
    return rules


def classify(name: str, rules: list[list[str]]) -> str:
    """The class of the first rule whose pattern matches ``name``."""
    for regex, cls in _compiled(tuple(tuple(r) for r in rules)):
        if regex.match(name):
            return cls
    raise AssertionError(f"no shard rule matches {name}")  # the last rule is "*"


@lru_cache(maxsize=4)
def _compiled(rules: tuple[tuple[str, str], ...]) -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(fnmatch.translate(pattern)), cls) for pattern, cls in rules]


@dataclass(frozen=True)
class WeightSummary:
    """Exact on-disk byte totals of the tensor table, grouped the way ranks split them.

    ``expert_bytes[l]``: bytes of one routed expert (w1, w2, w3 + scales) of backbone layer l;
    ``dspark_expert_bytes[k]`` likewise for DSpark stage k; ``engram_rows[i]`` and
    ``engram_row_bytes[i]``: rows and bytes per row (codes + scales) of the i-th engram table.
    """

    dense_bytes: int  # backbone tensors every rank loads
    dspark_dense_bytes: int  # mtp.* tensors other than routed experts
    expert_bytes: tuple[int, ...]
    dspark_expert_bytes: tuple[int, ...]
    engram_layer_ids: tuple[int, ...]
    engram_rows: tuple[int, ...]
    engram_row_bytes: tuple[int, ...]
    skipped_bytes: int
    dense_matmul_params: int  # logical elements of the backbone's replicated 2-D weights except
    # the embedding (a gather): what a token multiplies through outside the routed experts
    embed_bytes: int  # embed.weight (read by row, not whole)
    dense_fp8_params: int = 0  # logical elements of the backbone's FP8 2-D weights (the
    # projections whose bf16 twins the prefill may hold: ``cache.prefill_bf16_weights``)


@lru_cache(maxsize=8)
def weight_summary(spec: ModelSpec) -> WeightSummary:
    """Group the table's bytes by class (cached: the released table has 95,819 names)."""
    rules = shard_rules(dspark_enabled=True)
    matchers = _compiled(tuple(tuple(r) for r in rules))
    dense = dspark_dense = skipped = dense_params = dense_fp8 = 0
    per_expert: dict[tuple[str, int, int], int] = {}
    engram_bytes: dict[int, int] = {}
    table = expected_tensors(spec)
    for name, t in table.items():
        cls = next(c for regex, c in matchers if regex.match(name))
        if cls in (EXPERT, DSPARK_EXPERT):
            m = _EXPERT_RE.match(name)
            assert m is not None, name
            key = (m.group(1), int(m.group(2)), int(m.group(3)))
            per_expert[key] = per_expert.get(key, 0) + t.num_bytes
        elif cls == ENGRAM_ROWS:
            m = _ENGRAM_TABLE_RE.match(name)
            assert m is not None, name
            layer = int(m.group(1))
            engram_bytes[layer] = engram_bytes.get(layer, 0) + t.num_bytes
        elif cls == SKIPPED:
            skipped += t.num_bytes
        elif name.startswith("mtp."):
            dspark_dense += t.num_bytes
        else:
            dense += t.num_bytes
            if (name != "embed.weight" and t.kind in (KIND_FP8, KIND_BF16, KIND_F32)
                    and len(t.shape) == 2):
                dense_params += math.prod(t.logical_shape)
                if t.kind == KIND_FP8:
                    dense_fp8 += math.prod(t.logical_shape)
    expert = _one_size_per_layer(per_expert, "layers", spec.num_hidden_layers)
    dspark_expert = _one_size_per_layer(per_expert, "mtp", spec.num_nextn_predict_layers)
    rows = spec.engram_num_embeddings
    row_bytes = []
    for i, layer in enumerate(spec.engram_layer_ids):
        assert engram_bytes[layer] % rows[i] == 0, (layer, engram_bytes[layer], rows[i])
        row_bytes.append(engram_bytes[layer] // rows[i])
    return WeightSummary(dense, dspark_dense, expert, dspark_expert, tuple(spec.engram_layer_ids),
                         tuple(rows), tuple(row_bytes), skipped, dense_params,
                         table["embed.weight"].num_bytes, dense_fp8)


def _one_size_per_layer(per_expert: dict[tuple[str, int, int], int], prefix: str,
                        num_layers: int) -> tuple[int, ...]:
    """Bytes of one expert per layer; every expert of a layer has the same shapes."""
    found: dict[int, set[int]] = {layer: set() for layer in range(num_layers)}
    for (p, layer, _), size in per_expert.items():
        if p == prefix:
            found[layer].add(size)
    for layer, sizes in found.items():
        assert len(sizes) == 1, f"{prefix}.{layer}: experts of unequal size {sorted(sizes)}"
    return tuple(found[layer].pop() for layer in range(num_layers))


def dspark_num_slots(spec: ModelSpec, ep: int) -> int:
    """Physical DSpark expert slots per stage: the experts rounded up to a multiple of ``ep``
    (uniform placement; the extra slots hold replicas)."""
    return -(-spec.dspark_n_routed_experts // ep) * ep


def engram_row_range(num_rows: int, shard: int, num_shards: int) -> tuple[int, int]:
    """Rows ``[begin, end)`` of engram shard ``shard``: contiguous, sizes differ by at most 1."""
    return num_rows * shard // num_shards, num_rows * (shard + 1) // num_shards


def _rank_breakdown(spec: ModelSpec, topo: Topology, rank: int) -> dict[str, int]:
    """Bytes one rank loads, by class. Independent of the placement: every slot of a layer
    holds an expert of the same size, and each rank holds the same number of slots."""
    s = weight_summary(spec)
    ep, engram = topo.parallel.ep, topo.parallel.engram
    slots_per_rank = (spec.n_routed_experts + topo.eplb.redundant_experts) // ep
    expert = slots_per_rank * sum(s.expert_bytes)
    shard = rank % engram
    engram_bytes = 0
    for rows, row_bytes in zip(s.engram_rows, s.engram_row_bytes, strict=True):
        begin, end = engram_row_range(rows, shard, engram)
        engram_bytes += (end - begin) * row_bytes
    dspark = 0
    if topo.speculative.method == "dspark" and spec.num_nextn_predict_layers:
        dspark = s.dspark_dense_bytes + (dspark_num_slots(spec, ep) // ep
                                         * sum(s.dspark_expert_bytes))
    return {"dense_bytes": s.dense_bytes, "expert_bytes": expert, "engram_bytes": engram_bytes,
            "dspark_bytes": dspark,
            "total_bytes": s.dense_bytes + expert + engram_bytes + dspark}


def weight_bytes_per_rank(spec: ModelSpec, topo: Topology) -> list[int]:
    """Exact on-disk bytes each rank loads (needs only a validated topology, no placement)."""
    return [_rank_breakdown(spec, topo, r)["total_bytes"] for r in range(topo.world_size)]


def plan_weight_shards(spec: ModelSpec, topo: Topology, placement: dict) -> dict:
    """Which tensors each rank loads.

    Args:
        placement: ``plan_expert_placement``'s result. The slots of the ``prefill`` placement
            are loaded, except in ``completion`` mode (decode only), which loads ``decode``'s.
            When the two differ in ``normal`` mode the runtime must re-shuffle experts between
            phases (not planned here; a warning says so).

    Returns: ``{"rules": [[pattern, class]...], "expert_phase", "slots_per_rank",
    "ranks": [{"rank", "ep_rank", "engram_shard", "expert_slots": [[layer, slot, logical]...],
    "dspark_expert_slots": [[stage, slot, logical]...], "engram_rows": [[layer, begin, end]...],
    "bytes": {dense_bytes, expert_bytes, engram_bytes, dspark_bytes, total_bytes}}...],
    "weight_bytes_per_rank": [int...], "table_bytes" (the whole text table), "warnings"}``.
    """
    ep, engram = topo.parallel.ep, topo.parallel.engram
    dspark_enabled = topo.speculative.method == "dspark" and spec.num_nextn_predict_layers > 0
    phase = "decode" if topo.scheduler.mode == "completion" else "prefill"
    phy2log = placement[phase]["phy2log"]
    slots_per_rank = placement["experts_per_rank"]
    warnings = []
    if topo.scheduler.mode == "normal" and placement["prefill"] != placement["decode"]:
        warnings.append("prefill and decode expert placements differ; weights follow the prefill "
                        "placement (decode re-shuffle is not planned)")
    s = weight_summary(spec)
    ranks = []
    for rank in range(topo.world_size):
        ep_rank, shard = rank % ep, rank % engram
        own = range(ep_rank * slots_per_rank, (ep_rank + 1) * slots_per_rank)
        expert_slots = [[layer, slot, row[slot]] for layer, row in enumerate(phy2log)
                        for slot in own]
        dspark_slots: list[list[int]] = []
        if dspark_enabled:
            d = placement["dspark"]
            k = d["experts_per_rank"]
            dspark_slots = [[stage, slot, row[slot]] for stage, row in enumerate(d["phy2log"])
                            for slot in range(ep_rank * k, (ep_rank + 1) * k)]
        engram_rows = [[layer, *engram_row_range(rows, shard, engram)]
                       for layer, rows in zip(s.engram_layer_ids, s.engram_rows, strict=True)]
        ranks.append({"rank": rank, "ep_rank": ep_rank, "engram_shard": shard,
                      "expert_slots": expert_slots, "dspark_expert_slots": dspark_slots,
                      "engram_rows": engram_rows,
                      "bytes": _rank_breakdown(spec, topo, rank)})
    total = (s.dense_bytes + s.dspark_dense_bytes + s.skipped_bytes
             + spec.n_routed_experts * sum(s.expert_bytes)
             + spec.dspark_n_routed_experts * sum(s.dspark_expert_bytes)
             + sum(r * b for r, b in zip(s.engram_rows, s.engram_row_bytes, strict=True)))
    return {
        "rules": shard_rules(dspark_enabled),
        "expert_phase": phase,
        "slots_per_rank": slots_per_rank,
        "ranks": ranks,
        "weight_bytes_per_rank": [r["bytes"]["total_bytes"] for r in ranks],
        "table_bytes": total,
        "warnings": warnings,
    }
