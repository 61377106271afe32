"""Cache layout and block counts: what one token, one block and one sequence state cost, and
how many blocks and state slots every rank allocates.

Two kinds of cache memory (model-spec §3.1, seed §2.1), allocated together as one unit:

- **Paged blocks** hold what grows with context: per KV-source layer, the FP4 compressed entries
  (288 B each in the released model) and FP4 index keys (68 B each), ``block_size / ratio`` of
  each per block. A token costs ``spec.kv_bytes_per_token`` (890 B released) summed over the
  sources, so ``block_bytes = block_size * 890`` (56,960 B for 64-token blocks).
- **State slots** hold what is fixed per sequence: the FP8 window ring of every layer
  (``sliding_window`` records of 528 B; 2,703,360 B for 40 layers, +202,752 B when DSpark
  runs), the FP32 compressor partial groups of ratio>1 sources (``ratio * 2 * head_dim * 4`` B:
  8 KiB each, 24 KiB released) and the engram history (``max_ngram - 1`` int32 ids).

Block 0 and state slot 0 are sentinels no request owns (padding lanes point at them) and the
block manager keeps one reserve block, so ``num_usable_blocks = num_blocks - 2`` and
``num_state_slots = max_num_seqs + 1``.

Memory budget per rank (bytes): ``memory_bytes * memory_fraction`` minus the weights on that
rank, minus an activation workspace, minus a CUDA-graph pool, minus a fixed runtime reserve
(CUDA context, NCCL buffers, allocator slack: 1 GiB on GPUs, 0 on CPU). Estimates (the runtime
verifies free memory before allocating; these are deliberately generous):

- activation workspace = ``2 * act_bytes_per_token * max_num_batched_tokens`` + fp32 logits of
  the sampled rows (``max_num_seqs * (1 + draft) * vocab * 4``). ``act_bytes_per_token`` is the
  bf16 width of the live tensors of one block: hc streams in and out (``2 * hc_mult * D``),
  queries and attention output (``2 * H * Dh``), low-rank q and o (``q_lora + o_groups *
  o_lora``), indexer queries (``index_heads * index_dim``) and the routed + shared experts'
  gate/up/act (``3 * (k + shared) * moe_inter``); the factor 2 covers one op's input and
  output alive at once.
- graph pool = ``2 * act_bytes_per_token * largest decode graph rows`` (graphs share one pool,
  the largest capture dominates) + the indexer's fixed-width score rows of that capture: a
  graph scores every row over ``max_model_len // ratio`` keys (the smallest ratio of an index
  source), ``INDEX_ROW_BYTES_PER_KEY`` bytes per key (fp32 scores, the candidate mask, the
  top-k's temporaries).

State slots get at most half of the cache budget (fewer than ``max_num_seqs + 1`` only when
memory-bound); blocks get the rest. Every rank gets the same counts, the minimum over ranks:
DP ranks vote on phases and must share admission limits (seed §2).

Context parallelism: a sequence's blocks are dealt round-robin over the ``cp`` ranks of its DP
replica (block ``i`` on CP rank ``i % cp``), so one sequence of ``n`` tokens needs
``ceil(ceil(n / block) / cp)`` blocks on each CP rank; every CP rank holds the sequence's state
slot (windows and partial groups are small, and each CP rank attends its own window branch).

On ``memory_bytes == 0`` (CPU without a size) blocks are sized for ``max_num_seqs`` sequences of
``max_model_len`` tokens (capped at 1 Mi blocks) and ``memory_bound`` is False.

Prefill bf16 weights (``prefill_bf16_weights``): on an SM90 GPU every rank may also hold a
bf16 twin of each FP8 backbone projection (2 bytes per element: 13.7 GB for the released
model's 40 layers), which the prefill GEMMs read with both operands in shared memory
(``kernels/triton/linear_ss.py``: the same bits, ~19 % faster at 4K rows on an H100). The
twins come out of the cache budget. ``cache.prefill_bf16_weights``: ``auto`` holds them when
the cache left still admits the workload — ``min(max_num_seqs, ceil(num_requests / dp))``
sequences of ``prompt_len + output_len`` tokens (``workload``) on every rank — and they take at
most ``TWIN_MAX_CACHE_SHARE`` of what the cache would get without them; ``on`` always (the
cache must still fit one sequence), ``off`` never; never off SM90.
"""

from __future__ import annotations

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.planner.errors import TopologyError
from deepinfer.planner.passes.shard_map import weight_summary
from deepinfer.planner.passes.validate import resolved_max_model_len
from deepinfer.planner.topology import Topology

__all__ = ["activation_bytes_per_token", "plan_cache_layout"]

GIB = 2**30
GPU_RUNTIME_RESERVE_BYTES = GIB
NUM_SENTINEL_BLOCKS = 1  # block 0
NUM_RESERVE_BLOCKS = 1  # the block manager's reserve block
MAX_BLOCKS_UNBOUNDED = 2**20
STATE_BUDGET_SHARE = 0.5
INDEX_ROW_BYTES_PER_KEY = 16  # fp32 score + bool candidate mask + top-k temporaries, rounded up
CONTEXT_PROBES_TOKENS = (8192, 65536)
TWIN_MAX_CACHE_SHARE = 0.25  # ``auto``: the bf16 twins may take this much of the cache's room
TWIN_SM_ARCH = 90  # linear_ss is an SM90 (Hopper) kernel


def activation_bytes_per_token(spec: ModelSpec) -> int:
    """bf16 bytes of the live activations of one block per token (see the module docstring)."""
    widths = (2 * spec.hc_mult * spec.hidden_size
              + 2 * spec.num_attention_heads * spec.head_dim
              + spec.q_lora_rank + spec.o_groups * spec.o_lora_rank
              + spec.index_n_heads * spec.index_head_dim
              + 3 * (spec.num_experts_per_tok + spec.n_shared_experts) * spec.moe_intermediate_size)
    return 2 * widths


def decode_rows(topo: Topology) -> int:
    """Rows of the largest decode step: every sequence with its draft tokens, within the token
    budget."""
    s = topo.scheduler
    return min(s.max_num_seqs * (1 + topo.speculative.num_draft_tokens), s.max_num_batched_tokens)


def _max_index_keys(spec: ModelSpec, max_len: int) -> int:
    """Width of a decode graph's index score rows: ``max_len // ratio`` over the index sources
    (0 without an indexer)."""
    ratios = [lay.compress_ratio for lay in spec.layers[:spec.num_hidden_layers]
              if lay.owns_indexer and lay.compress_ratio > 0]
    return max_len // min(ratios) if ratios else 0


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def blocks_per_sequence(context_tokens: int, block_size: int, cp: int) -> int:
    """Blocks one sequence of ``context_tokens`` needs on each CP rank (round-robin split)."""
    return _ceil_div(_ceil_div(context_tokens, block_size), cp)


def plan_cache_layout(spec: ModelSpec, topo: Topology, weight_bytes_per_rank: list[int]) -> dict:
    """Returns the cache section: record sizes, per-block and per-slot bytes, the block and slot
    counts and the per-rank memory budget. Raises ``TopologyError`` (field
    ``cache.memory_fraction``) when a rank has no room left for even one sequence's state and
    one block."""
    hw, cache, sched = topo.hardware, topo.cache, topo.scheduler
    block = cache.block_size_tokens
    cp = topo.parallel.cp
    dspark = topo.speculative.method == "dspark" and spec.num_nextn_predict_layers > 0
    draft = topo.speculative.num_draft_tokens
    max_len = resolved_max_model_len(spec, topo)

    # ---- per-token, per-block, per-slot bytes ------------------------------------------
    sources = []
    for i in spec.kv_source_layer_ids:
        r = spec.layers[i].compress_ratio
        sources.append({
            "layer": i, "compress_ratio": r, "entries_per_block": block // r,
            "compressed_bytes_per_block": block // r * spec.compressed_record_bytes,
            "index_key_bytes_per_block": block // r * spec.index_key_record_bytes,
        })
    block_bytes = sum(s["compressed_bytes_per_block"] + s["index_key_bytes_per_block"]
                      for s in sources)
    window_layers = [lay.layer_id for lay in spec.backbone_layers]
    if dspark:
        window_layers += [lay.layer_id for lay in spec.layers[spec.num_hidden_layers:]]
    window_ring_bytes = spec.sliding_window * spec.window_record_bytes
    compressor_state = {i: spec.layers[i].compress_ratio * 2 * spec.head_dim * 4
                        for i in spec.kv_source_layer_ids if spec.layers[i].compress_ratio > 1}
    engram_history_bytes = (spec.engram_max_ngram_size - 1) * 4 if spec.engram_layer_ids else 0
    window_bytes = len(window_layers) * window_ring_bytes
    state_slot_bytes = window_bytes + sum(compressor_state.values()) + engram_history_bytes

    # ---- memory budget ------------------------------------------------------------------
    act_per_token = activation_bytes_per_token(spec)
    logits = sched.max_num_seqs * (1 + draft) * spec.vocab_size * 4
    workspace = 2 * act_per_token * sched.max_num_batched_tokens + logits
    graph_pool = 2 * act_per_token * decode_rows(topo) + \
        decode_rows(topo) * _max_index_keys(spec, max_len) * INDEX_ROW_BYTES_PER_KEY
    is_gpu = hw.sm_arch > 0 or hw.device not in ("cpu", "")
    reserve = GPU_RUNTIME_RESERVE_BYTES if is_gpu else 0
    desired_slots = sched.max_num_seqs + 1
    budget = []
    memory_bound = hw.memory_bytes > 0
    twin_bytes = 2 * weight_summary(spec).dense_fp8_params
    usable = room = 0
    if memory_bound:
        usable = int(hw.memory_bytes * cache.memory_fraction)
        room = min(usable - weights - workspace - graph_pool - reserve
                   for weights in weight_bytes_per_rank)
    wl = topo.workload
    workload_seqs = min(sched.max_num_seqs, _ceil_div(wl.num_requests, topo.parallel.dp))
    workload_bytes = (workload_seqs * blocks_per_sequence(
        min(wl.prompt_len_tokens + wl.output_len_tokens, max_len), block, cp) * block_bytes
        + (workload_seqs + 1) * state_slot_bytes
        + (NUM_SENTINEL_BLOCKS + NUM_RESERVE_BLOCKS) * block_bytes)
    twins = _prefill_bf16_weights(topo, twin_bytes, room if memory_bound else None,
                                  workload_bytes)
    if memory_bound:
        held = twins["bytes_per_rank"]
        for rank, weights in enumerate(weight_bytes_per_rank):
            left = usable - weights - held - workspace - graph_pool - reserve
            budget.append({"rank": rank, "usable_bytes": usable, "weight_bytes": weights,
                           "prefill_bf16_weight_bytes": held,
                           "activation_workspace_bytes": workspace, "graph_pool_bytes": graph_pool,
                           "runtime_reserve_bytes": reserve, "cache_bytes": left})
        cache_bytes = min(b["cache_bytes"] for b in budget)
        worst = min(budget, key=lambda b: (b["cache_bytes"], b["rank"]))["rank"]
        one_more_block = NUM_SENTINEL_BLOCKS + NUM_RESERVE_BLOCKS + 1
        minimum = 2 * state_slot_bytes + one_more_block * block_bytes
        if cache_bytes < minimum:
            raise TopologyError(topo.source, "cache.memory_fraction", (
                f"rank {worst} has {cache_bytes} B ({cache_bytes / GIB:.2f} GiB) left for the "
                f"cache after weights{held and ', their prefill bf16 twins' or ''}, workspace "
                f"and graph pool, less than the {minimum} B one sequence needs; raise "
                "memory_fraction, lower max_num_batched_tokens, shard the weights further"
                + (" or set cache.prefill_bf16_weights: off" if held else "")))
        state_cap = int(cache_bytes * STATE_BUDGET_SHARE) // state_slot_bytes
        num_state_slots = max(2, min(desired_slots, state_cap))
        num_blocks = (cache_bytes - num_state_slots * state_slot_bytes) // block_bytes
    else:
        per_seq = blocks_per_sequence(max_len, block, cp)
        num_blocks = min(sched.max_num_seqs * per_seq + NUM_SENTINEL_BLOCKS + NUM_RESERVE_BLOCKS,
                         MAX_BLOCKS_UNBOUNDED)
        num_state_slots = desired_slots
    usable_blocks = num_blocks - NUM_SENTINEL_BLOCKS - NUM_RESERVE_BLOCKS

    probes = []
    for ctx in CONTEXT_PROBES_TOKENS:
        per_seq = blocks_per_sequence(ctx, block, cp)
        by_blocks = usable_blocks // per_seq
        by_slots = num_state_slots - 1
        probes.append({"context_tokens": ctx, "blocks_per_seq": per_seq,
                       "max_seqs": min(by_blocks, by_slots),
                       "limited_by": "blocks" if by_blocks < by_slots else "state_slots",
                       "within_max_model_len": ctx <= max_len})

    return {
        "window_record_bytes": spec.window_record_bytes,
        "compressed_record_bytes": spec.compressed_record_bytes,
        "index_key_record_bytes": spec.index_key_record_bytes,
        "context_bytes_per_token": spec.kv_bytes_per_token,
        "kv_sources": sources,
        "window_layers": window_layers,
        "window_ring_tokens": spec.sliding_window,
        "window_ring_bytes": window_ring_bytes,
        "window_bytes_per_seq": window_bytes,
        "compressor_state_bytes": [[i, b] for i, b in sorted(compressor_state.items())],
        "engram_history_bytes": engram_history_bytes,
        "state_slot_bytes": state_slot_bytes,
        "block_size_tokens": block,
        "block_bytes": block_bytes,
        "max_model_len_tokens": max_len,
        "cp": cp,
        "context_split": "round_robin_blocks",
        "num_blocks": num_blocks,
        "num_usable_blocks": usable_blocks,
        "num_state_slots": num_state_slots,
        "memory_bound": memory_bound,
        "cache_bytes_per_rank": num_blocks * block_bytes + num_state_slots * state_slot_bytes,
        "activation_bytes_per_token": act_per_token,
        "memory_budget_per_rank": budget,
        "max_seqs_at_context": probes,
        "prefill_bf16_weights": twins,
    }


def _prefill_bf16_weights(topo: Topology, twin_bytes: int, room: int | None,
                          workload_bytes: int) -> dict:
    """``{"setting", "enabled", "bytes_per_rank", "reason"}``: whether every rank holds the bf16
    twins of its FP8 projections (module docstring); ``room``: the smallest rank's cache budget
    without them (None: not memory-bound); ``workload_bytes``: the cache the workload's
    sequences need on a rank. Raises ``TopologyError`` for ``on`` off SM90."""
    setting = topo.cache.prefill_bf16_weights
    hw = topo.hardware
    sm90 = hw.device not in ("cpu", "") and hw.sm_arch == TWIN_SM_ARCH
    if setting == "on" and not sm90:
        raise TopologyError(topo.source, "cache.prefill_bf16_weights", (
            f"on needs an SM90 GPU plan (hardware.sm_arch {TWIN_SM_ARCH}); this plan is for "
            f"{hw.device or 'an unnamed device'} sm_arch {hw.sm_arch}: use auto or off"))
    if twin_bytes == 0:
        enabled, reason = False, "the model has no FP8 projections"
    elif setting == "off":
        enabled, reason = False, "off in the topology"
    elif not sm90:
        enabled, reason = False, f"the linear_ss kernel needs sm_arch {TWIN_SM_ARCH}"
    elif setting == "on":
        enabled, reason = True, "on in the topology"
    elif room is None:
        enabled, reason = False, "auto without hardware.memory_gib to budget against"
    elif twin_bytes > TWIN_MAX_CACHE_SHARE * room:
        enabled, reason = False, (f"auto: {twin_bytes / GIB:.2f} GiB would take more than "
                                  f"{TWIN_MAX_CACHE_SHARE:.0%} of the cache's "
                                  f"{max(room, 0) / GIB:.2f} GiB")
    elif room - twin_bytes < workload_bytes:
        enabled, reason = False, (f"auto: the cache left after {twin_bytes / GIB:.2f} GiB "
                                  f"would not hold the workload's sequences "
                                  f"({workload_bytes / GIB:.2f} GiB)")
    else:
        enabled, reason = True, (f"auto: {twin_bytes / GIB:.2f} GiB of the cache's "
                                 f"{room / GIB:.2f} GiB, which still holds the workload's "
                                 f"sequences ({workload_bytes / GIB:.2f} GiB)")
    return {"setting": setting, "enabled": enabled,
            "bytes_per_rank": twin_bytes if enabled else 0, "reason": reason}
