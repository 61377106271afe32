"""Cross-field checks of a parsed topology against the model: the rules no single field states.

The topology parser checks each field alone (types, ranges, allowed values); this pass checks
what needs two fields or the model, before any other pass runs, so later passes may assume:

- ``parallel``: every size >= 1; ``ep`` and ``engram`` divide the model ranks ``dp * cp`` (EP
  and engram groups are contiguous partitions of them); an EP group never straddles a node
  boundary partially (``ep`` divides ``gpus_per_node`` or is a multiple of it), so the
  hierarchical EPLB policy sees whole nodes.
- ``hardware``: ``gpus_per_node * nodes == dp * cp``: one model rank per GPU (per process on
  ``cpu``), every GPU used. A job that leaves GPUs idle is written with fewer nodes.
- Context parallelism splits a sequence's *context* (its paged blocks, round-robin by block
  index) over the ``cp`` ranks; every CP rank holds all heads and merges partial attention by
  log-sum-exp. So CP puts no divisibility condition on the heads (the single K=V latent head of
  V4.1 could not be split anyway); it needs only ``cp >= 1``.
- ``eplb``: at least ``ep`` routed experts; ``experts + redundant_experts`` a multiple of ``ep``
  (every rank holds the same number of slots); ``expert_groups`` divides the experts.
- ``cache``: ``max_model_len_tokens <= max_position_embeddings``; the block size is a multiple of
  every compress ratio (a block holds whole compressed entries) and of the index tile, the
  tokens one candidate block covers (``candidate_block_size * ratio`` of the candidate source),
  so a candidate block never straddles two paged blocks.
- ``scheduler``: ``prefill_chunk_size_tokens <= max_num_batched_tokens``.
- ``speculative``: ``dspark`` only for a model with DSpark stages; ``num_draft_tokens`` in
  ``1..dspark_block_size`` for dspark, 0 for none.
- memory: the weights of every rank (exact, ``shard_map.weight_bytes_per_rank``) fit in
  ``memory_bytes * memory_fraction``.
"""

from __future__ import annotations

import math

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.planner.errors import TopologyError
from deepinfer.planner.passes.shard_map import weight_bytes_per_rank
from deepinfer.planner.topology import Topology

__all__ = ["index_tile_tokens", "resolved_max_model_len", "validate_topology"]

GIB = 2**30


def resolved_max_model_len(spec: ModelSpec, topo: Topology) -> int:
    """``cache.max_model_len_tokens``, or the model's maximum when it is 0."""
    return topo.cache.max_model_len_tokens or spec.max_position_embeddings


def index_tile_tokens(spec: ModelSpec) -> int:
    """Tokens covered by one candidate block of the two-level indexer (1 without candidates)."""
    cand = spec.candidate_source_layer_id
    if cand is None:
        return 1
    return spec.candidate_block_size * spec.layers[cand].compress_ratio


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def validate_topology(spec: ModelSpec, topo: Topology) -> list[str]:
    """Raise ``TopologyError(topo.source, field, message)`` on the first broken rule (the
    message names both values); return warnings (plain sentences) for odd but plannable
    inputs."""
    warnings: list[str] = []

    def fail(field: str, message: str) -> None:
        raise TopologyError(topo.source, field, message)

    p, hw, cache, sched, spec_dec, eplb = (topo.parallel, topo.hardware, topo.cache,
                                           topo.scheduler, topo.speculative, topo.eplb)
    for name in ("dp", "cp", "ep", "engram"):
        if getattr(p, name) < 1:
            fail(f"parallel.{name}", f"must be >= 1, got {getattr(p, name)}")
    world = topo.world_size
    if world % p.ep:
        fail("parallel.ep", f"EP size {p.ep} must divide the model ranks dp*cp = "
             f"{p.dp}*{p.cp} = {world} (EP groups are contiguous partitions of them)")
    if world % p.engram:
        fail("parallel.engram", f"engram group size {p.engram} must divide the model ranks "
             f"dp*cp = {world}")
    if hw.gpus_per_node < 1 or hw.nodes < 1:
        fail("hardware.gpus_per_node", f"gpus_per_node ({hw.gpus_per_node}) and nodes "
             f"({hw.nodes}) must be >= 1")
    if hw.gpus_per_node * hw.nodes != world:
        fail("hardware.gpus_per_node", f"gpus_per_node * nodes = {hw.gpus_per_node} * "
             f"{hw.nodes} = {hw.gpus_per_node * hw.nodes} must equal the model ranks dp * cp = "
             f"{p.dp} * {p.cp} = {world} (one rank per GPU)")
    g = hw.gpus_per_node
    if (p.ep <= g and g % p.ep) or (p.ep > g and p.ep % g):
        fail("parallel.ep", f"EP size {p.ep} and gpus_per_node {g}: one must divide the "
             "other, or EP groups would straddle node boundaries")

    # ---- experts --------------------------------------------------------------------------
    n_exp = spec.n_routed_experts
    if n_exp < p.ep:
        fail("parallel.ep", f"EP size {p.ep} exceeds the model's {n_exp} routed experts")
    if eplb.redundant_experts < 0:
        fail("eplb.redundant_experts", f"must be >= 0, got {eplb.redundant_experts}")
    if (n_exp + eplb.redundant_experts) % p.ep:
        fail("eplb.redundant_experts", f"routed experts + redundant experts = {n_exp} + "
             f"{eplb.redundant_experts} = {n_exp + eplb.redundant_experts} must be a multiple "
             f"of the EP size {p.ep}")
    if eplb.expert_groups < 0 or (eplb.expert_groups and n_exp % eplb.expert_groups):
        fail("eplb.expert_groups", f"expert_groups {eplb.expert_groups} must divide the "
             f"{n_exp} routed experts (0 = one group)")

    # ---- cache ------------------------------------------------------------------------------
    if cache.max_model_len_tokens < 0:
        fail("cache.max_model_len_tokens", f"must be >= 0, got {cache.max_model_len_tokens}")
    if cache.max_model_len_tokens > spec.max_position_embeddings:
        fail("cache.max_model_len_tokens", f"{cache.max_model_len_tokens} exceeds the model's "
             f"max_position_embeddings {spec.max_position_embeddings}")
    block = cache.block_size_tokens
    ratios = sorted({lay.compress_ratio for lay in spec.backbone_layers if lay.compress_ratio})
    tile = index_tile_tokens(spec)
    need = math.lcm(tile, *ratios) if ratios else tile
    if block < 1 or block % need:
        fail("cache.block_size_tokens", f"block size {block} must be a positive multiple of "
             f"every compress ratio {ratios} and of the index tile {tile} tokens (lcm {need})")
    if not 0.0 < cache.memory_fraction <= 1.0:
        fail("cache.memory_fraction", f"must be in (0, 1], got {cache.memory_fraction}")

    # ---- scheduler ------------------------------------------------------------------------
    if sched.max_num_seqs < 1:
        fail("scheduler.max_num_seqs", f"must be >= 1, got {sched.max_num_seqs}")
    if sched.prefill_chunk_size_tokens > sched.max_num_batched_tokens:
        fail("scheduler.prefill_chunk_size_tokens", f"prefill chunk "
             f"{sched.prefill_chunk_size_tokens} tokens exceeds max_num_batched_tokens "
             f"{sched.max_num_batched_tokens}")

    # ---- speculative ----------------------------------------------------------------------
    draft = spec_dec.num_draft_tokens
    if spec_dec.method == "dspark":
        if spec.num_nextn_predict_layers == 0:
            fail("speculative.method", "dspark needs a model with DSpark stages, but "
                 "num_nextn_predict_layers is 0")
        if not 1 <= draft <= spec.dspark_block_size:
            fail("speculative.num_draft_tokens", f"{draft} must be in 1..dspark_block_size "
                 f"({spec.dspark_block_size}) for dspark")
    elif draft != 0:
        fail("speculative.num_draft_tokens", f"{draft} draft tokens with method "
             f"'{spec_dec.method}'; only dspark drafts (use 0)")
    rows = sched.max_num_seqs * (1 + draft)
    if rows > sched.max_num_batched_tokens and sched.mode != "prompt":
        warnings.append(f"a full decode step has max_num_seqs * (1 + num_draft_tokens) = {rows} "
                        f"rows, more than max_num_batched_tokens {sched.max_num_batched_tokens}; "
                        "decode batches are capped at the token budget")

    # ---- memory ---------------------------------------------------------------------------
    weights = weight_bytes_per_rank(spec, topo)
    heaviest = max(range(world), key=lambda r: (weights[r], -r))
    if hw.memory_bytes > 0:
        usable = int(hw.memory_bytes * cache.memory_fraction)
        if weights[heaviest] > usable:
            fail("hardware.memory_bytes", f"rank {heaviest} needs {weights[heaviest]} B "
                 f"({_gib(weights[heaviest])}) of weights but memory_bytes * memory_fraction = "
                 f"{hw.memory_bytes} * {cache.memory_fraction} = {usable} B ({_gib(usable)}); "
                 "raise parallel.ep / parallel.engram or use more GPUs")
        if weights[heaviest] > 0.9 * usable:
            warnings.append(f"weights take {weights[heaviest] / usable:.0%} of the usable memory "
                            f"of rank {heaviest}; little is left for the KV cache")
    else:
        warnings.append(f"hardware.memory_bytes is 0 (device {hw.device}): memory is not "
                        "checked and the cache is sized for max_num_seqs full-length sequences")

    # ---- workload -------------------------------------------------------------------------
    w = topo.workload
    max_len = resolved_max_model_len(spec, topo)
    if w.prompt_len_tokens + w.output_len_tokens > max_len:
        warnings.append(f"workload prompt + output = {w.prompt_len_tokens + w.output_len_tokens} "
                        f"tokens exceeds max_model_len {max_len}")
    return warnings
