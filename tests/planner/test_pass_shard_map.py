"""plan_weight_shards: name rules, per-rank expert slots and engram rows, and exact weight bytes
(hand-computed expert and engram sizes; the dense part within a hand-estimated bound)."""

import json
from dataclasses import replace

import pytest
from planner_topos import GIB, H200

from deepinfer.artifacts.weight_names import expected_tensors
from deepinfer.planner.passes.expert_placement import plan_expert_placement
from deepinfer.planner.passes.shard_map import (
    classify,
    plan_weight_shards,
    shard_rules,
    weight_bytes_per_rank,
)
from deepinfer.planner.topology import (
    EplbSection,
    HardwareSection,
    ModelSection,
    ParallelSection,
    SchedulerSection,
    SpeculativeSection,
    Topology,
)

# One released routed expert: w1, w3 [2304, 5120] and w2 [5120, 2304] in FP4, two codes per byte
# (5,898,240 B each) + one ue8m0 scale per 32 input columns (368,640 B each).
RELEASED_EXPERT_BYTES = 3 * (2304 * 5120 // 2 + 2304 * 5120 // 32)
# Engram rows: 256 e4m3 codes + 8 ue8m0 scales.
ENGRAM_ROWS = (384006168, 384016682)
ENGRAM_ROW_BYTES = 256 + 256 // 32
# tiny expert: 3 x (64 * 256 / 2 + 64 * 256 / 32) bytes
TINY_EXPERT_BYTES = 3 * (64 * 256 // 2 + 64 * 256 // 32)


@pytest.fixture(scope="module")
def released_plan(released):
    topo = Topology(model=ModelSection("builtin:v41-flash"), hardware=H200,
                    parallel=ParallelSection(dp=8, ep=8, engram=8))
    return plan_weight_shards(released, topo, plan_expert_placement(released, topo))


def test_rules(tiny):
    on, off = shard_rules(True), shard_rules(False)
    assert classify("layers.3.ffn.experts.7.w1.weight", on) == "expert"
    assert classify("layers.3.ffn.experts.7.w2.scale", off) == "expert"
    assert classify("layers.1.engram.embed.weight", on) == "engram_rows"
    assert classify("layers.1.engram.embed.scale", on) == "engram_rows"
    assert classify("layers.1.engram.wkv.weight", on) == "replicated"
    assert classify("layers.3.ffn.shared_experts.w1.weight", on) == "replicated"
    assert classify("embed.weight", off) == "replicated"
    assert classify("mtp.0.ffn.experts.1.w1.scale", on) == "dspark_expert"
    assert classify("mtp.0.ffn.experts.1.w1.scale", off) == "skipped"
    assert classify("mtp.2.markov_head.head.weight", on) == "replicated"
    assert classify("mtp.2.markov_head.head.weight", off) == "skipped"
    assert classify("vision.blocks.0.attn.qkv.weight", on) == "skipped"
    assert classify("image_newline", on) == "skipped"
    # every table name has a class
    for name in expected_tensors(tiny):
        assert classify(name, on) in ("replicated", "expert", "engram_rows", "dspark_expert")


def test_released_expert_and_engram_bytes(released_plan):
    expert = 48 * 40 * RELEASED_EXPERT_BYTES  # 384 experts / 8 ranks, 40 MoE layers
    assert RELEASED_EXPERT_BYTES == 18_800_640
    for r in released_plan["ranks"]:
        b = r["bytes"]
        assert b["expert_bytes"] == expert
        begin0, end0 = ENGRAM_ROWS[0] * r["rank"] // 8, ENGRAM_ROWS[0] * (r["rank"] + 1) // 8
        begin1, end1 = ENGRAM_ROWS[1] * r["rank"] // 8, ENGRAM_ROWS[1] * (r["rank"] + 1) // 8
        assert b["engram_bytes"] == (end0 - begin0 + end1 - begin1) * ENGRAM_ROW_BYTES
        assert r["engram_rows"] == [[1, begin0, end0], [14, begin1, end1]]
        assert b["dspark_bytes"] == 0
        assert b["total_bytes"] == sum(v for k, v in b.items() if k != "total_bytes")
    # all engram rows exactly once over the 8 shards
    assert sum(r["bytes"]["engram_bytes"] for r in released_plan["ranks"]) == \
        sum(ENGRAM_ROWS) * ENGRAM_ROW_BYTES


def test_released_dense_bytes_within_hand_estimate(released_plan):
    # Hand estimate of the replicated tensors: embed + head 2 x 129280 x 5120 x 2 B = 2.65 GB;
    # per layer FP8 attention (wq_a 6.6M, wq_b 41.9M, wkv 2.6M, wo_a 33.6M, wo_b 41.9M) = 126.6 MB
    # x 40 = 5.06 GB; shared experts 3 x 2304 x 5120 x 40 = 1.42 GB; mHC fns 2 x 24 x 20480 x 4 B
    # x 40 = 0.16 GB; routers 384 x 5120 x 2 B x 40 = 0.16 GB; engram wkv 2 x 25600 x 6144 =
    # 0.31 GB; total ~9.76 GB plus indexers, compressors, norms and scales.
    dense = released_plan["ranks"][0]["bytes"]["dense_bytes"]
    assert 9.7e9 < dense < 10.2e9
    weights = released_plan["weight_bytes_per_rank"]
    assert len(weights) == 8 and max(weights) - min(weights) <= ENGRAM_ROW_BYTES * 2
    # 33.6 GiB experts + 23.6 GiB engram + ~9.2 GiB dense
    assert 66 * GIB < max(weights) < 68 * GIB


def test_released_slots_cover_the_placement(released_plan, released):
    topo = Topology(model=ModelSection("builtin:v41-flash"), hardware=H200,
                    parallel=ParallelSection(dp=8, ep=8, engram=8))
    phy2log = plan_expert_placement(released, topo)["prefill"]["phy2log"]
    seen = set()
    for r in released_plan["ranks"]:
        assert len(r["expert_slots"]) == 48 * 40
        for layer, slot, logical in r["expert_slots"]:
            assert slot // 48 == r["ep_rank"]
            assert phy2log[layer][slot] == logical
            seen.add((layer, slot))
    assert len(seen) == 40 * 384
    assert released_plan["expert_phase"] == "prefill" and released_plan["warnings"] == []


def test_plan_is_small_and_json_clean(released_plan):
    text = json.dumps(released_plan)
    assert json.loads(text) == released_plan
    assert len(text) < 400_000  # rules + slot lists, not 95,819 names x 8 ranks


def test_tiny_with_dspark_and_redundancy(tiny):
    topo = Topology(model=ModelSection("builtin:tiny"),
                    hardware=HardwareSection(gpus_per_node=2),
                    parallel=ParallelSection(dp=2, ep=2, engram=2),
                    eplb=EplbSection(redundant_experts=2),
                    speculative=SpeculativeSection("dspark", 2))
    placement = plan_expert_placement(tiny, topo)
    plan = plan_weight_shards(tiny, topo, placement)
    assert TINY_EXPERT_BYTES == 26_112
    for r in plan["ranks"]:
        assert r["bytes"]["expert_bytes"] == 5 * 8 * TINY_EXPERT_BYTES  # (8 + 2) / 2 slots
        assert len(r["dspark_expert_slots"]) == 2 * 2  # 2 stages x 4 / 2 slots
        assert r["bytes"]["dspark_bytes"] > 2 * 2 * TINY_EXPERT_BYTES
    # engram tables 660 and 864 rows of 32 + 1 bytes, halved
    assert [r["bytes"]["engram_bytes"] for r in plan["ranks"]] == [(330 + 432) * 33] * 2
    assert plan["weight_bytes_per_rank"] == weight_bytes_per_rank(tiny, topo)
    assert ["mtp.*", "replicated"] in plan["rules"]
    # the table total: every tensor once
    assert plan["table_bytes"] == sum(t.num_bytes for t in expected_tensors(tiny).values())


def test_completion_mode_loads_decode_placement(tiny, tmp_path):
    load = [[e + 1 for e in range(8)] for _ in range(8)]
    (tmp_path / "d.json").write_text(json.dumps({"load": load}))
    topo = Topology(model=ModelSection("builtin:tiny"), hardware=HardwareSection(gpus_per_node=2),
                    parallel=ParallelSection(dp=2, ep=2), base_dir=str(tmp_path),
                    eplb=EplbSection(redundant_experts=2, decode_load_stats="d.json"),
                    scheduler=SchedulerSection(mode="completion"))
    placement = plan_expert_placement(tiny, topo)
    plan = plan_weight_shards(tiny, topo, placement)
    assert plan["expert_phase"] == "decode"
    assert [s[2] for s in plan["ranks"][0]["expert_slots"][:5]] == \
        placement["decode"]["phy2log"][0][:5]
    normal = plan_weight_shards(tiny, replace(topo, scheduler=SchedulerSection()), placement)
    assert normal["expert_phase"] == "prefill" and len(normal["warnings"]) == 1


def test_deterministic(tiny):
    topo = Topology(model=ModelSection("builtin:tiny"))
    placement = plan_expert_placement(tiny, topo)
    assert plan_weight_shards(tiny, topo, placement) == plan_weight_shards(tiny, topo, placement)
