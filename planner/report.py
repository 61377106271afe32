"""``render_report``: the plan explained for a person, as markdown (``plan/report.md``).

It reads only the plan dict, so it can be rendered again from any plan directory. Sections:
inputs, the decisions and why, the memory budget per rank, the KV cache (bytes per token of
context, fixed state per sequence, blocks, the largest batch at 8K and 64K context), predicted
step times against the roofline, scheduler limits, warnings. Missing optional keys are shown as
"n/a" rather than failing, so a report never hides a plan.
"""

from __future__ import annotations

from typing import Any

__all__ = ["render_report"]

GIB = 2**30
NA = "n/a"


def render_report(plan: dict[str, Any]) -> str:
    """Markdown text of the report for ``plan`` (the ``plan.json`` object)."""
    parts = [
        _header(plan),
        _inputs(plan),
        _decisions(plan),
        _memory(plan),
        _cache(plan),
        _cost(plan),
        _scheduler(plan),
        _warnings(plan),
    ]
    return "\n\n".join(p.rstrip() for p in parts if p) + "\n"


# ---- formatting ------------------------------------------------------------------------------
def _bytes(n: Any) -> str:
    """``72.04 GB`` style for large sizes, exact bytes for small ones."""
    if not isinstance(n, int | float):
        return NA
    if abs(n) >= GIB:
        return f"{n / GIB:,.2f} GiB"
    if abs(n) >= 2**20:
        return f"{n / 2**20:,.1f} MiB"
    if abs(n) >= 2**10:
        return f"{n / 2**10:,.1f} KiB"
    return f"{n:,.0f} B" if float(n).is_integer() else f"{n:,.1f} B"


def _num(x: Any, digits: int = 3) -> str:
    if isinstance(x, bool) or x is None:
        return NA if x is None else str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{digits}g}" if abs(x) < 100 else f"{x:,.0f}"
    return str(x)


def _flops(n: float) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f}"


def _time(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return NA
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.3f} ms"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _ranges(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    out, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            out.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(out)


# ---- sections --------------------------------------------------------------------------------
def _header(plan: dict) -> str:
    topo = plan.get("topology", {})
    return (f"# deepinfer plan `{str(plan.get('plan_id', ''))[:16]}`\n\n"
            f"Compiled from `{topo.get('source', NA)}` by deepinfer "
            f"{plan.get('deepinfer_version', NA)} (plan schema {plan.get('schema_version', NA)}). "
            "`plan.json` holds every number below; this file explains them.")


def _inputs(plan: dict) -> str:
    topo = plan.get("topology", {})
    hw, par = topo.get("hardware", {}), topo.get("parallel", {})
    cfg = plan.get("model", {}).get("config", {})
    model = topo.get("model", {})
    world = par.get("dp", 1) * par.get("cp", 1)
    lines = [
        "## Inputs",
        "",
        f"- **Model** `{model.get('path', NA)}` (weights: {model.get('weights', NA)}): "
        f"{cfg.get('num_hidden_layers', NA)} layers, hidden {cfg.get('hidden_size', NA)}, "
        f"{cfg.get('num_attention_heads', NA)} heads of {cfg.get('head_dim', NA)}, "
        f"{cfg.get('n_routed_experts', NA)} routed experts "
        f"(top-{cfg.get('num_experts_per_tok', NA)}), "
        f"{cfg.get('num_nextn_predict_layers', NA)} DSpark stages.",
        f"- **Hardware** {hw.get('nodes', NA)} node(s) x {hw.get('gpus_per_node', NA)} "
        f"`{hw.get('device', NA)}`: {_bytes(hw.get('memory_bytes'))} per device, "
        f"{_num((hw.get('hbm_bytes_per_s') or 0) / 1e12)} TB/s, "
        f"{_num((hw.get('bf16_flops_per_s') or 0) / 1e12)} bf16 / "
        f"{_num((hw.get('fp8_flops_per_s') or 0) / 1e12)} fp8 TFLOP/s, SM {hw.get('sm_arch', NA)}.",
        f"- **Parallelism** {world} model ranks: DP {par.get('dp', NA)} x CP {par.get('cp', NA)}; "
        f"EP groups of {par.get('ep', NA)}, engram groups of {par.get('engram', NA)}.",
    ]
    return "\n".join(lines)


def _decisions(plan: dict) -> str:
    ep = plan.get("expert_placement", {})
    shards = plan.get("weight_shards", {})
    kernels = plan.get("kernels", {}).get("backend_by_op", {})
    buckets = plan.get("graph_buckets", {})
    groups = plan.get("rank_groups", {})
    backends: dict[str, int] = {}
    for backend in kernels.values():
        backends[backend] = backends.get(backend, 0) + 1
    policy = ep.get("policy", NA)
    why = ("expert groups split evenly over the nodes an EP group spans, so groups are packed "
           "onto nodes first" if policy == "hierarchical" else
           "the expert groups do not split evenly over the nodes, so the cluster is treated as "
           "one node with one group")
    lines = [
        "## Decisions",
        "",
        f"- **Rank groups**: {len(groups.get('ep_groups', []))} EP group(s) "
        f"{groups.get('ep_groups', NA) if len(groups.get('ep_groups', [])) <= 4 else ''} of "
        "contiguous ranks (expert all-to-all stays inside a node where it fits).",
        f"- **Expert placement** ({policy} EPLB: {why}): "
        f"{_num(ep.get('num_physical_experts'))} physical slots for "
        f"{_num(ep.get('num_logical_experts'))} experts per MoE layer, "
        f"{_num(ep.get('experts_per_rank'))} per rank; load from "
        f"{ep.get('load_sources', {}).get('prefill', NA)} (prefill) and "
        f"{ep.get('load_sources', {}).get('decode', NA)} (decode).",
        f"- **Weights**: routed experts split by EP (the {shards.get('expert_phase', NA)} "
        "placement), engram tables split by rows over the engram group, everything else "
        "replicated" + (f"; checkpoint {_bytes(shards['checkpoint_bytes'])} in all."
                         if "checkpoint_bytes" in shards else "."),
        "- **Kernels**: " + (", ".join(f"{n} ops on `{b}`" for b, n in sorted(backends.items()))
                              or NA) + ".",
        f"- **CUDA graphs**: {len(buckets.get('decode', []))} decode batch sizes up to "
        f"{max(buckets.get('decode', [0]) or [0])} (padding waste <= "
        f"{_num(buckets.get('max_padding_waste'))}, worst "
        f"{_num(buckets.get('decode_padding_waste'))}); "
        f"{len(buckets.get('prefill_tokens', []))} prefill token buckets.",
    ]
    return "\n".join(lines)


def _memory(plan: dict) -> str:
    budget = plan.get("cache", {}).get("memory_budget_per_rank") or []
    shards = {r.get("rank"): r.get("bytes", {}) for r in
              plan.get("weight_shards", {}).get("ranks", [])}
    if not budget:
        return ("## Memory budget per rank\n\nNot memory-bound (no device memory size): the "
                "cache is sized for max_num_seqs full-length sequences.")
    rows: dict[tuple, list[int]] = {}
    for b in budget:
        w = shards.get(b.get("rank"), {})
        row = (_bytes(b.get("usable_bytes")), _bytes(b.get("weight_bytes")),
               _bytes(w.get("expert_bytes")), _bytes(w.get("engram_bytes")),
               _bytes(b.get("prefill_bf16_weight_bytes")),
               _bytes(b.get("activation_workspace_bytes")), _bytes(b.get("graph_pool_bytes")),
               _bytes(b.get("runtime_reserve_bytes")), _bytes(b.get("cache_bytes")))
        rows.setdefault(row, []).append(b.get("rank"))
    table = _table(["ranks", "usable", "weights", "(routed experts)", "(engram rows)",
                    "prefill bf16 twins", "workspace", "graph pool", "reserve", "cache"],
                   [[_ranges(ranks), *row] for row, ranks in rows.items()])
    twins = plan.get("cache", {}).get("prefill_bf16_weights") or {}
    return ("## Memory budget per rank\n\n"
            "usable = device memory x cache.memory_fraction; cache = usable - weights - "
            "prefill bf16 twins - activation workspace - CUDA-graph pool - runtime reserve. "
            "Every rank gets the smallest cache, so DP ranks share admission limits.\n\n"
            f"Prefill bf16 twins of the FP8 projections (cache.prefill_bf16_weights "
            f"{twins.get('setting', '?')}): {'held' if twins.get('enabled') else 'not held'} — "
            f"{twins.get('reason', 'not planned')}.\n\n" + table)


def _cache(plan: dict) -> str:
    c = plan.get("cache", {})
    block = c.get("block_size_tokens") or 1
    compressed = sum(s.get("compressed_bytes_per_block", 0) for s in c.get("kv_sources", []))
    index_keys = sum(s.get("index_key_bytes_per_block", 0) for s in c.get("kv_sources", []))
    window_layers = len(c.get("window_layers", []))
    compressor = sum(b for _, b in c.get("compressor_state_bytes", []))
    lines = [
        "## KV cache",
        "",
        f"- **Context KV**: {_num(c.get('context_bytes_per_token'))} bytes per token of context "
        f"({_num(compressed / block)} compressed KV + {_num(index_keys / block)} index keys, "
        f"over KV-source layers {[s.get('layer') for s in c.get('kv_sources', [])]}).",
        f"- **Fixed state per sequence**: {_bytes(c.get('state_slot_bytes'))} = window rings "
        f"{window_layers} layers x {_num(c.get('window_ring_tokens'))} tokens x "
        f"{_num(c.get('window_record_bytes'))} B ({_bytes(c.get('window_bytes_per_seq'))}) + "
        f"compressor partial groups {_bytes(compressor)} + engram history "
        f"{_bytes(c.get('engram_history_bytes'))}.",
        f"- **Blocks**: {_num(c.get('num_blocks'))} blocks of {_num(c.get('block_size_tokens'))} "
        f"tokens ({_bytes(c.get('block_bytes'))} each; {_num(c.get('num_usable_blocks'))} usable "
        f"after the sentinel and reserve blocks) and {_num(c.get('num_state_slots'))} state "
        f"slots (slot 0 is the sentinel); {_bytes(c.get('cache_bytes_per_rank'))} per rank.",
        "",
        _table(["context", "blocks per sequence", "max concurrent sequences", "limited by"],
               [[f"{p.get('context_tokens', 0) // 1024}K", _num(p.get("blocks_per_seq")),
                 _num(p.get("max_seqs")), str(p.get("limited_by", NA))]
                for p in c.get("max_seqs_at_context", [])]),
    ]
    return "\n".join(lines)


def _cost(plan: dict) -> str:
    cost = plan.get("cost_model", {})
    rows = []
    for name in ("decode", "prefill"):
        s = cost.get(name)
        if not isinstance(s, dict):
            continue
        bytes_total = sum(v for v in s.get("bytes", {}).values() if isinstance(v, int | float))
        flops_total = sum(v for v in s.get("flops", {}).values() if isinstance(v, int | float))
        rows.append([name, _num(s.get("rows")), _num(s.get("context_tokens")),
                     _bytes(bytes_total), _flops(flops_total),
                     _time(s.get("memory_time_s")), _time(s.get("compute_time_s")),
                     _time(s.get("step_time_s")), str(s.get("bound", NA)),
                     _num(s.get("tokens_per_s"))])
    if not rows:
        return "## Predicted step times\n\nThe cost model gave no step estimates."
    notes = "".join(f"\n- {a}" for a in cost.get("assumptions", []))
    return ("## Predicted step times (roofline, per rank)\n\n"
            "memory time = bytes / HBM bandwidth, compute time = FLOPs / peak; the predicted step "
            "time is the larger (the roofline bound). Benchmarks report measured time against "
            "it.\n\n"
            + _table(["step", "rows", "context", "bytes", "FLOPs", "memory time", "compute time",
                      "predicted", "bound", "tokens/s (all DP)"], rows)
            + ("\n\nAssumptions:" + notes if notes else ""))


def _scheduler(plan: dict) -> str:
    s = plan.get("scheduler", {})
    return "## Scheduler limits\n\n" + _table(["limit", "value"],
                                             [[k, _num(v)] for k, v in sorted(s.items())])


def _warnings(plan: dict) -> str:
    warnings = plan.get("warnings") or []
    if not warnings:
        return "## Warnings\n\nNone."
    return "## Warnings\n\n" + "\n".join(f"- {w}" for w in warnings)
