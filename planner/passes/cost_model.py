"""Roofline cost model: bytes moved and FLOPs of one decode step and one prefill step, per rank.

A step takes ``max(bytes / hbm_bytes_per_s, flops / flops_per_s)``: both components are
reported so the report can say which bound holds (decode is expected to be memory-bound,
prefill compute-bound). GEMMs over FP8/FP4 weights run at ``fp8_flops_per_s``, attention and
indexer math at ``bf16_flops_per_s``. Without hardware numbers (CPU) times are None.

Decode step (per rank): ``B = min(max_num_seqs, sequences that fit at the workload context)``
sequences, each with ``1 + draft`` rows, at context ``C = prompt + output / 2`` tokens (the
average over a request's decode). Bytes:

- dense weights: every replicated tensor is read once (the embedding only by row);
- routed experts: an EP group receives ``B * (1 + draft) * k`` picks per layer from each of
  its ``max(1, ep / cp)`` DP replicas; with uniform routing over ``P`` physical slots the expected
  distinct slots touched are ``P * (1 - (1 - 1/P)^picks)``, a rank reads its ``1/ep`` share;
- KV: per sequence (decode) or row (prefill) and per layer, the window (``min(C, window)``
  528-B records), the top-k compressed entries (``min(index_topk, C / ratio)`` 288-B entries,
  every ratio>0 layer), and the index keys each indexer scans (``C / ratio`` 68-B keys; a layer
  restricted by the candidate mask scans ``candidate_topk_blocks * candidate_block_size`` at
  most); CP divides the compressed context (the window is read on every CP rank);
- engram: ``(max_ngram - 1) * n_heads`` table rows per row and engram layer;
- activations: ``activation_bytes_per_token`` per row and layer (cache_layout's estimate).

FLOPs: ``2 * rows * dense_matmul_params`` (shared experts, attention projections, router, mHC,
head; the head only over rows that need logits: a prefill step's prompt-last rows),
``2 * 3 * D * moe_inter`` per routed pick landing on this rank, attention
``4 * H * Dh * (window + top-k)`` per row and layer, indexer ``2 * heads * dim * keys``.

Prefill step: ``max_num_batched_tokens`` rows at average context ``prompt / 2``, same formulas
(experts: the picks of one step). Tokens/s: rows per step * DP replicas / step time (DSpark
acceptance is not modelled: verify rows count as one token per sequence).
"""

from __future__ import annotations

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.planner.passes.cache_layout import activation_bytes_per_token, blocks_per_sequence
from deepinfer.planner.passes.shard_map import weight_summary
from deepinfer.planner.topology import Topology

__all__ = ["expected_distinct", "plan_cost_model", "step_cost"]


def expected_distinct(num_picks: float, num_items: int) -> float:
    """Expected distinct items hit by ``num_picks`` independent uniform picks of ``num_items``."""
    if num_items <= 0:
        return 0.0
    return num_items * (1.0 - (1.0 - 1.0 / num_items) ** num_picks)


def _kv_bytes_and_flops_per_row(spec: ModelSpec, context: float, cp: int) -> dict:
    """KV bytes read and attention / indexer FLOPs of one query row over all backbone layers."""
    window = min(context, spec.sliding_window)
    kv = attn = idx = 0.0
    for lay in spec.backbone_layers:
        kv += window * spec.window_record_bytes
        entries = 0.0
        if lay.compress_ratio:
            visible = context / lay.compress_ratio
            entries = min(spec.index_topk, visible)
            kv += entries * spec.compressed_record_bytes / cp
            if lay.owns_indexer:
                scanned = visible
                if lay.candidate_source is not None:
                    scanned = min(visible, spec.candidate_topk_blocks * spec.candidate_block_size)
                kv += scanned * spec.index_key_record_bytes / cp
                idx += 2 * spec.index_n_heads * spec.index_head_dim * scanned / cp
        attn += 4 * spec.num_attention_heads * spec.head_dim * (window + entries / cp)
    return {"kv_bytes": kv, "attention_flops": attn, "indexer_flops": idx}


def step_cost(spec: ModelSpec, topo: Topology, placement: dict, rows: int, context: float,
          dp_per_ep_group: int, kv_readers: int, logit_rows: int | None = None) -> dict:
    """Bytes, FLOPs and times of one step with ``rows`` query rows on one rank; the cache is
    read ``kv_readers`` times (once per sequence in decode: a sequence's verify rows share one
    read of its cache; once per row in prefill, an upper bound). ``logit_rows`` (default
    ``rows``): the rows the vocabulary head multiplies — every decode/verify row, but only each
    prompt's last row in a prefill step."""
    hw, p = topo.hardware, topo.parallel
    s = weight_summary(spec)
    per_row = _kv_bytes_and_flops_per_row(spec, context, p.cp)
    picks = rows * dp_per_ep_group * spec.num_experts_per_tok  # per layer, per EP group
    slots = placement["num_physical_experts"]
    touched = expected_distinct(picks, slots) / p.ep  # slots per rank per layer
    expert_bytes = touched * sum(s.expert_bytes)
    engram_rows = (spec.engram_max_ngram_size - 1) * spec.engram_n_heads
    engram_bytes = rows * sum(engram_rows * b for b in s.engram_row_bytes)
    dense_bytes = s.dense_bytes - s.embed_bytes + rows * spec.hidden_size * 2
    act_bytes = rows * activation_bytes_per_token(spec) * spec.num_hidden_layers
    kv_bytes = kv_readers * per_row["kv_bytes"]
    total_bytes = dense_bytes + expert_bytes + kv_bytes + engram_bytes + act_bytes
    expert_params = 3 * spec.hidden_size * spec.moe_intermediate_size
    head_params = spec.vocab_size * spec.hidden_size  # part of dense_matmul_params
    logit_rows = rows if logit_rows is None else logit_rows
    dense_flops = 2.0 * (rows * (s.dense_matmul_params - head_params) + logit_rows * head_params)
    expert_flops = 2.0 * expert_params * picks / p.ep * spec.num_hidden_layers
    attn_flops = rows * per_row["attention_flops"]
    idx_flops = rows * per_row["indexer_flops"]
    gemm_rate = hw.fp8_flops_per_s or hw.bf16_flops_per_s
    mem_s = total_bytes / hw.hbm_bytes_per_s if hw.hbm_bytes_per_s > 0 else None
    comp_s = None
    if gemm_rate > 0 and hw.bf16_flops_per_s > 0:
        comp_s = (dense_flops + expert_flops) / gemm_rate + (attn_flops + idx_flops) / \
            hw.bf16_flops_per_s
    step_s = max(mem_s, comp_s) if mem_s is not None and comp_s is not None else None
    return {
        "rows": rows,
        "context_tokens": context,
        "bytes": {"dense_weight_bytes": dense_bytes, "expert_bytes": expert_bytes,
                  "kv_bytes": kv_bytes, "engram_bytes": engram_bytes,
                  "activation_bytes": act_bytes, "total_bytes": total_bytes},
        "flops": {"dense_flops": dense_flops, "expert_flops": expert_flops,
                  "attention_flops": attn_flops, "indexer_flops": idx_flops,
                  "total_flops": dense_flops + expert_flops + attn_flops + idx_flops},
        "expert_slots_touched_per_layer": touched,
        "memory_time_s": mem_s,
        "compute_time_s": comp_s,
        "step_time_s": step_s,
        "bound": None if step_s is None else ("memory" if mem_s >= comp_s else "compute"),
    }


def plan_cost_model(spec: ModelSpec, topo: Topology, cache_layout: dict, placement: dict) -> dict:
    """Returns ``{"decode": step, "prefill": step, "assumptions": [...]}``; each step is
    ``{"rows", "context_tokens", "bytes": {...}, "flops": {...}, "memory_time_s",
    "compute_time_s", "step_time_s", "bound", "tokens_per_s"}`` (+ ``batch_seqs`` for decode).
    Bytes and FLOPs are floats (expectations), per rank and step."""
    p, sched, w = topo.parallel, topo.scheduler, topo.workload
    draft = topo.speculative.num_draft_tokens if topo.speculative.method == "dspark" else 0
    dp_per_ep_group = max(1, p.ep // p.cp)

    context = w.prompt_len_tokens + w.output_len_tokens / 2
    per_seq = blocks_per_sequence(int(context + 0.5), cache_layout["block_size_tokens"], p.cp)
    fit = min(cache_layout["num_usable_blocks"] // per_seq, cache_layout["num_state_slots"] - 1)
    batch = max(1, min(sched.max_num_seqs, fit, sched.max_num_batched_tokens // (1 + draft)))
    decode = step_cost(spec, topo, placement, batch * (1 + draft), context, dp_per_ep_group, batch)
    decode["batch_seqs"] = batch
    decode["tokens_per_s"] = (batch * p.dp / decode["step_time_s"]
                              if decode["step_time_s"] else None)

    rows = sched.max_num_batched_tokens
    prefill = step_cost(spec, topo, placement, rows, w.prompt_len_tokens / 2, dp_per_ep_group, rows,
                        logit_rows=-(-rows // max(1, w.prompt_len_tokens)))
    prefill["tokens_per_s"] = (rows * p.dp / prefill["step_time_s"]
                               if prefill["step_time_s"] else None)
    return {
        "decode": decode,
        "prefill": prefill,
        "assumptions": [
            "uniform routing over physical expert slots",
            "every replicated weight read once per step; embedding read by row",
            "decode context = prompt + output / 2; prefill context = prompt / 2",
            "DSpark acceptance not modelled",
            "no communication time (EP all-to-all, CP merges, engram gathers)",
        ],
    }
