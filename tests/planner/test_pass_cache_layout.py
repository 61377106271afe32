"""plan_cache_layout: record and block sizes of model-spec §3.1, the memory budget recomputed by
hand for the released model on 8 H200, memory-bound state slots, CP, and the CPU fallback."""

import json
from dataclasses import replace

import pytest
from planner_topos import GIB, RELEASED_8

from deepinfer.planner.errors import TopologyError
from deepinfer.planner.passes.cache_layout import plan_cache_layout
from deepinfer.planner.passes.shard_map import weight_bytes_per_rank
from deepinfer.planner.topology import (
    CacheSection,
    HardwareSection,
    ModelSection,
    ParallelSection,
    SpeculativeSection,
    Topology,
)

# Released fixed per-sequence state: 40 windows x 128 x 528 B, 3 ratio-2 compressor rings of
# 2 x 2 x 512 x 4 B, engram history 3 x int32.
RELEASED_SLOT_BYTES = 40 * 128 * 528 + 3 * 8192 + 12
# bf16 live activations per token: 2 x (2*4*5120 + 2*64*512 + 1280 + 8*1024 + 32*128 + 3*7*2304)
RELEASED_ACT_BYTES = 2 * (40960 + 65536 + 1280 + 8192 + 4096 + 48384)


@pytest.fixture(scope="module")
def released_layout(released):
    return plan_cache_layout(released, RELEASED_8, weight_bytes_per_rank(released, RELEASED_8))


def test_released_record_and_block_sizes(released_layout):
    c = released_layout
    assert (c["window_record_bytes"], c["compressed_record_bytes"],
            c["index_key_record_bytes"]) == (528, 288, 68)
    assert c["context_bytes_per_token"] == 890
    assert c["block_bytes"] == 64 * 890 == 56_960
    assert [(s["layer"], s["entries_per_block"]) for s in c["kv_sources"]] == [
        (2, 32), (8, 32), (14, 32), (20, 64)]
    assert c["window_bytes_per_seq"] == 2_703_360
    assert c["compressor_state_bytes"] == [[2, 8192], [8, 8192], [14, 8192]]
    assert c["state_slot_bytes"] == RELEASED_SLOT_BYTES
    assert c["activation_bytes_per_token"] == RELEASED_ACT_BYTES == 336_896


def test_released_block_count_by_hand(released, released_layout):
    c = released_layout
    usable = int(139 * GIB * 0.9)
    weights = max(weight_bytes_per_rank(released, RELEASED_8))
    workspace = 2 * RELEASED_ACT_BYTES * 8192 + 256 * 129280 * 4
    # + the indexer's fixed-width score rows: 256 rows x 1M keys (ratio-1 index sources at the
    # released max_model_len) x 16 B
    graph_pool = 2 * RELEASED_ACT_BYTES * 256 + 256 * 1_048_576 * 16
    cache = usable - weights - workspace - graph_pool - GIB
    assert c["num_state_slots"] == 257
    assert c["num_blocks"] == (cache - 257 * RELEASED_SLOT_BYTES) // 56_960
    assert c["num_usable_blocks"] == c["num_blocks"] - 2
    # sensible: ~50 GB of cache, over 800k blocks (> 50M tokens of context per rank)
    assert 800_000 < c["num_blocks"] < 1_000_000
    budget = c["memory_budget_per_rank"]
    assert len(budget) == 8 and min(b["cache_bytes"] for b in budget) == cache
    assert all(b["activation_workspace_bytes"] == workspace for b in budget)
    assert c["cache_bytes_per_rank"] <= cache


def test_released_max_seqs_at_context(released_layout):
    c = released_layout
    p8k, p64k = c["max_seqs_at_context"]
    assert p8k == {"context_tokens": 8192, "blocks_per_seq": 128, "max_seqs": 256,
                   "limited_by": "state_slots", "within_max_model_len": True}
    assert p64k["blocks_per_seq"] == 1024
    assert p64k["max_seqs"] == min(c["num_usable_blocks"] // 1024, 256)


def test_dspark_adds_its_windows(released):
    topo = replace(RELEASED_8, speculative=SpeculativeSection("dspark", 5))
    c = plan_cache_layout(released, topo, weight_bytes_per_rank(released, topo))
    assert c["state_slot_bytes"] == RELEASED_SLOT_BYTES + 3 * 128 * 528
    assert c["window_layers"] == list(range(43))


def test_context_parallel_splits_blocks(tiny):
    topo = Topology(model=ModelSection("builtin:tiny"), hardware=HardwareSection(gpus_per_node=2),
                    parallel=ParallelSection(dp=1, cp=2))
    c = plan_cache_layout(tiny, topo, weight_bytes_per_rank(tiny, topo))
    # 8192 tokens = 128 blocks of 64, dealt over 2 CP ranks; tiny max_model_len 4096 -> 32/rank
    assert c["max_seqs_at_context"][0]["blocks_per_seq"] == 64
    assert not c["max_seqs_at_context"][0]["within_max_model_len"]
    assert c["num_blocks"] == 256 * 32 + 2
    assert c["cp"] == 2


def test_cpu_without_memory_size(tiny):
    topo = Topology(model=ModelSection("builtin:tiny"))
    c = plan_cache_layout(tiny, topo, weight_bytes_per_rank(tiny, topo))
    # tiny: 64-token blocks, 2 sources: ratio 2 (32 entries) and ratio 1 (64), 36 + 17 B each
    assert c["block_bytes"] == 32 * 53 + 64 * 53
    assert c["context_bytes_per_token"] == 53 / 2 + 53
    assert c["state_slot_bytes"] == 8 * 8 * 66 + 2 * 2 * 64 * 4 + 12
    assert c["num_blocks"] == 256 * (4096 // 64) + 2 and not c["memory_bound"]
    assert c["memory_budget_per_rank"] == []


def test_memory_bound_state_slots(tiny):
    slot = 8 * 8 * 66 + 1024 + 12
    topo = Topology(model=ModelSection("builtin:tiny"),
                    hardware=HardwareSection(device="custom", memory_bytes=0))
    weights = weight_bytes_per_rank(tiny, topo)
    base = plan_cache_layout(tiny, topo, weights)
    act = base["activation_bytes_per_token"]
    fixed = weights[0] + 2 * act * 8192 + 256 * 512 * 4 + 2 * act * 256 + 256 * 4096 * 16 + GIB
    cache = 100 * slot  # room for 50 state slots under the half-budget rule
    topo = replace(topo, hardware=replace(topo.hardware, memory_bytes=fixed + cache),
                   cache=CacheSection(memory_fraction=1.0))
    c = plan_cache_layout(tiny, topo, weights)
    assert c["num_state_slots"] == 50
    assert c["num_blocks"] == (cache - 50 * slot) // c["block_bytes"]
    assert c["max_seqs_at_context"][0]["max_seqs"] <= 49


def test_no_room_for_the_cache(released):
    # 0.5 x 139 GiB = 69.5 GiB < 66.4 GiB weights + 5.3 GiB workspace + graphs + 1 GiB reserve
    topo = replace(RELEASED_8, cache=CacheSection(memory_fraction=0.5))
    with pytest.raises(TopologyError) as info:
        plan_cache_layout(released, topo, weight_bytes_per_rank(released, topo))
    assert info.value.field == "cache.memory_fraction"
    assert "rank 3" in info.value.message  # ranks 3 and 7 hold one more engram row


def test_json_clean_and_deterministic(released, released_layout):
    assert json.loads(json.dumps(released_layout)) == released_layout
    again = plan_cache_layout(released, RELEASED_8, weight_bytes_per_rank(released, RELEASED_8))
    assert again == released_layout


def _twins_topology(tiny_memory_bytes: int, setting: str = "auto", sm_arch: int = 90,
                    **workload) -> Topology:
    from deepinfer.planner.topology import WorkloadSection

    hw = HardwareSection(device="h200" if sm_arch else "cpu", memory_bytes=tiny_memory_bytes,
                         sm_arch=sm_arch)
    return Topology(model=ModelSection("builtin:tiny"), hardware=hw,
                    cache=CacheSection(memory_fraction=1.0, prefill_bf16_weights=setting),
                    workload=WorkloadSection(**workload))


def test_prefill_bf16_twins_come_out_of_the_cache(tiny):
    """``auto`` on an SM90 GPU with room: every FP8 backbone projection's bf16 twin (2 bytes an
    element) is held and the cache budget shrinks by exactly those bytes; ``off`` holds none."""
    from deepinfer.planner.passes.shard_map import weight_summary

    twin = 2 * weight_summary(tiny).dense_fp8_params
    assert twin > 0
    topo = _twins_topology(64 * GIB)
    weights = weight_bytes_per_rank(tiny, topo)
    on = plan_cache_layout(tiny, topo, weights)
    off = plan_cache_layout(tiny, replace(topo, cache=replace(topo.cache,
                                                              prefill_bf16_weights="off")), weights)
    assert on["prefill_bf16_weights"]["enabled"] and on["prefill_bf16_weights"]["bytes_per_rank"] \
        == twin
    assert not off["prefill_bf16_weights"]["enabled"]
    assert off["prefill_bf16_weights"]["bytes_per_rank"] == 0
    assert off["prefill_bf16_weights"]["reason"] == "off in the topology"
    b_on, b_off = on["memory_budget_per_rank"][0], off["memory_budget_per_rank"][0]
    assert b_on["prefill_bf16_weight_bytes"] == twin and b_off["prefill_bf16_weight_bytes"] == 0
    assert b_off["cache_bytes"] - b_on["cache_bytes"] == twin


def test_prefill_bf16_twins_auto_declines(tiny):
    """``auto`` holds no twins where they would take over a quarter of the cache's room, where
    the cache left would not hold the workload's sequences, off SM90, or without a memory
    size; ``on`` off SM90 is an error naming the field."""
    from deepinfer.planner.passes.shard_map import weight_summary

    twin = 2 * weight_summary(tiny).dense_fp8_params
    probe = _twins_topology(64 * GIB, "off")
    weights = weight_bytes_per_rank(tiny, probe)
    fixed = 64 * GIB - plan_cache_layout(tiny, probe, weights)["memory_budget_per_rank"][0][
        "cache_bytes"]  # what the budget takes before the cache
    tight = plan_cache_layout(tiny, _twins_topology(fixed + 3 * twin), weights)
    assert not tight["prefill_bf16_weights"]["enabled"]
    assert "more than 25%" in tight["prefill_bf16_weights"]["reason"]
    busy = plan_cache_layout(tiny, _twins_topology(fixed + 8 * twin, num_requests=10**6,
                                                   prompt_len_tokens=4096), weights)
    assert not busy["prefill_bf16_weights"]["enabled"]
    assert "workload" in busy["prefill_bf16_weights"]["reason"]
    roomy = plan_cache_layout(tiny, _twins_topology(fixed + 8 * twin), weights)
    assert roomy["prefill_bf16_weights"]["enabled"]
    blackwell = plan_cache_layout(tiny, _twins_topology(64 * GIB, sm_arch=100), weights)
    assert not blackwell["prefill_bf16_weights"]["enabled"]
    assert "sm_arch 90" in blackwell["prefill_bf16_weights"]["reason"]
    no_size = plan_cache_layout(tiny, _twins_topology(0), weights)
    assert not no_size["prefill_bf16_weights"]["enabled"]
    with pytest.raises(TopologyError) as info:
        plan_cache_layout(tiny, _twins_topology(0, "on", sm_arch=0), weights)
    assert info.value.field == "cache.prefill_bf16_weights"
    assert "SM90" in info.value.message


def test_prefill_bf16_twins_on_without_room_names_the_switch(tiny):
    """``on`` where the twins leave no room for one sequence: the memory error says the twins
    took it and names the switch that gives it back."""
    from deepinfer.planner.passes.shard_map import weight_summary

    twin = 2 * weight_summary(tiny).dense_fp8_params
    probe = _twins_topology(64 * GIB, "off")
    weights = weight_bytes_per_rank(tiny, probe)
    fixed = 64 * GIB - plan_cache_layout(tiny, probe, weights)["memory_budget_per_rank"][0][
        "cache_bytes"]
    with pytest.raises(TopologyError) as info:
        plan_cache_layout(tiny, _twins_topology(fixed + twin // 2, "on"), weights)
    assert info.value.field == "cache.memory_fraction"
    assert "prefill bf16 twins" in info.value.message
    assert "cache.prefill_bf16_weights: off" in info.value.message
    plan_cache_layout(tiny, _twins_topology(fixed + twin // 2, "off"), weights)  # fits without
