"""plan_cost_model: the roofline rule (max of memory and compute time, both reported), hand
checks of the expected-distinct-experts formula and the byte terms, CPU without numbers."""

import json
from dataclasses import replace

import pytest
from planner_topos import RELEASED_8

from deepinfer.artifacts.model_spec import load_model_spec
from deepinfer.planner.passes.cache_layout import plan_cache_layout
from deepinfer.planner.passes.cost_model import expected_distinct, plan_cost_model
from deepinfer.planner.passes.expert_placement import plan_expert_placement
from deepinfer.planner.passes.shard_map import weight_bytes_per_rank, weight_summary
from deepinfer.planner.topology import (
    ModelSection,
    SchedulerSection,
    Topology,
    WorkloadSection,
)


def plan(spec, topo):
    cache = plan_cache_layout(spec, topo, weight_bytes_per_rank(spec, topo))
    placement = plan_expert_placement(spec, topo)
    return plan_cost_model(spec, topo, cache, placement), cache


@pytest.fixture(scope="module")
def released_cost(released):
    return plan(released, RELEASED_8)


def test_expected_distinct_by_hand():
    assert expected_distinct(0, 384) == 0
    assert expected_distinct(5, 1) == 1
    assert expected_distinct(2, 2) == pytest.approx(1.5)  # 2 x (1 - 1/4)
    assert expected_distinct(1, 384) == pytest.approx(1)
    assert expected_distinct(10**6, 384) == pytest.approx(384)


def test_roofline_rule(released_cost):
    cost, _ = released_cost
    for step in (cost["decode"], cost["prefill"]):
        assert step["memory_time_s"] == pytest.approx(step["bytes"]["total_bytes"] / 4.8e12)
        assert step["step_time_s"] == max(step["memory_time_s"], step["compute_time_s"])
        assert step["bound"] == ("memory" if step["memory_time_s"] >= step["compute_time_s"]
                                 else "compute")
        parts = [v for k, v in step["bytes"].items() if k != "total_bytes"]
        assert step["bytes"]["total_bytes"] == pytest.approx(sum(parts))
    assert cost["prefill"]["bound"] == "compute"
    d = cost["decode"]
    assert d["tokens_per_s"] == pytest.approx(d["batch_seqs"] * 8 / d["step_time_s"])


def test_decode_terms_by_hand(released, released_cost):
    cost, _ = released_cost
    d = cost["decode"]
    s = weight_summary(released)
    assert d["batch_seqs"] == 256 and d["rows"] == 256
    assert d["context_tokens"] == 1024 + 128
    # dense: every replicated tensor except the embedding, plus 256 embedding rows of 10240 B
    assert d["bytes"]["dense_weight_bytes"] == s.dense_bytes - 129280 * 5120 * 2 + 256 * 10240
    # 8 DP replicas x 256 tokens x 6 picks over 384 slots: all 48 slots of a rank are touched
    assert d["expert_slots_touched_per_layer"] == pytest.approx(48, abs=1e-6)
    assert d["bytes"]["expert_bytes"] == pytest.approx(48 * 40 * 18_800_640)
    # engram: 2 layers x 3 orders x 8 heads rows of 264 B per token
    assert d["bytes"]["engram_bytes"] == 256 * 2 * 24 * 264
    # window part of the KV: 40 layers x 128 records x 528 B per sequence, the rest compressed
    assert d["bytes"]["kv_bytes"] > 256 * 40 * 128 * 528


def test_decode_kv_grows_with_context(released):
    short, _ = plan(released, RELEASED_8)
    long_topo = replace(RELEASED_8, workload=WorkloadSection(prompt_len_tokens=16384))
    long, _ = plan(released, long_topo)
    per_seq_short = short["decode"]["bytes"]["kv_bytes"] / short["decode"]["batch_seqs"]
    per_seq_long = long["decode"]["bytes"]["kv_bytes"] / long["decode"]["batch_seqs"]
    assert per_seq_long > per_seq_short


def test_batch_limited_by_fit(released):
    # 1M-token contexts: 15,625 blocks of 64 tokens each; a rank's ~928k blocks hold 59
    topo = replace(RELEASED_8, workload=WorkloadSection(prompt_len_tokens=1_000_000,
                                                        output_len_tokens=0))
    cost, cache = plan(released, topo)
    assert cost["decode"]["batch_seqs"] == cache["num_usable_blocks"] // 15_625
    assert cost["decode"]["batch_seqs"] < 256


def test_cpu_has_no_times():
    tiny = load_model_spec("builtin:tiny")
    topo = Topology(model=ModelSection("builtin:tiny"),
                    scheduler=SchedulerSection(max_num_seqs=4))
    cost, _ = plan(tiny, topo)
    assert cost["decode"]["step_time_s"] is None and cost["decode"]["tokens_per_s"] is None
    assert cost["decode"]["batch_seqs"] == 4
    assert cost["decode"]["bytes"]["total_bytes"] > 0
    assert json.loads(json.dumps(cost)) == cost


def test_deterministic(released, released_cost):
    assert plan(released, RELEASED_8)[0] == released_cost[0]


def test_head_flops_only_for_rows_with_logits(released, released_cost):
    """Decode: every row multiplies the vocabulary head; a prefill step only each prompt's last
    row (the engine computes no logits for the others): the head leaves the other rows' FLOPs."""
    cost, _ = released_cost
    s = weight_summary(released)
    head = released.vocab_size * released.hidden_size
    d, p = cost["decode"], cost["prefill"]
    assert d["flops"]["dense_flops"] == pytest.approx(2.0 * d["rows"] * s.dense_matmul_params)
    prompts = -(-p["rows"] // RELEASED_8.workload.prompt_len_tokens)
    assert p["flops"]["dense_flops"] == pytest.approx(
        2.0 * (p["rows"] * (s.dense_matmul_params - head) + prompts * head))
