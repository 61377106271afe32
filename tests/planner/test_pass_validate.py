"""validate_topology: a valid released and tiny topology pass; each broken cross-field rule raises
a TopologyError naming the topology file, the field and both values."""

import dataclasses

import pytest
from planner_topos import GIB, h200

from deepinfer.planner.errors import TopologyError
from deepinfer.planner.passes.shard_map import weight_bytes_per_rank
from deepinfer.planner.passes.validate import index_tile_tokens, validate_topology
from deepinfer.planner.topology import (
    CacheSection,
    EplbSection,
    HardwareSection,
    ModelSection,
    ParallelSection,
    SchedulerSection,
    SpeculativeSection,
    Topology,
)

SOURCE = "topo.yaml"


def cpu(ranks: int = 1) -> HardwareSection:
    return HardwareSection(device="cpu", gpus_per_node=ranks, nodes=1)


def tiny_topo(**sections) -> Topology:
    """The tiny model on CPU, one process per model rank unless ``hardware`` is given."""
    par = sections.get("parallel", ParallelSection())
    sections.setdefault("hardware", cpu(par.dp * par.cp))
    return Topology(model=ModelSection("builtin:tiny"), source=SOURCE, **sections)


def released_8xh200(**overrides) -> Topology:
    fields = {"hardware": h200(), "parallel": ParallelSection(dp=8, ep=8, engram=8)}
    fields.update(overrides)
    return Topology(model=ModelSection("builtin:v41-flash"), source=SOURCE, **fields)


def expect_error(spec, topo, field: str, *fragments: str) -> TopologyError:
    with pytest.raises(TopologyError) as info:
        validate_topology(spec, topo)
    err = info.value
    assert err.source == SOURCE
    assert err.field == field, str(err)
    for fragment in fragments:
        assert fragment in err.message, (fragment, err.message)
    return err


def test_released_on_8_h200_is_valid(released):
    assert validate_topology(released, released_8xh200()) == []


def test_released_with_dspark_is_valid(released):
    topo = released_8xh200(speculative=SpeculativeSection("dspark", 5))
    assert validate_topology(released, topo) == []


def test_tiny_on_cpu_warns_memory_unchecked(tiny):
    warnings = validate_topology(tiny, tiny_topo())
    assert any("memory_bytes is 0" in w for w in warnings)


def test_index_tile(tiny, released):
    assert index_tile_tokens(released) == 8  # candidate_block_size 8 x ratio 1 of layer 20
    assert index_tile_tokens(tiny) == 4  # candidate_block_size 4 x ratio 1 of layer 4


def test_ep_must_divide_model_ranks(tiny):
    topo = tiny_topo(parallel=ParallelSection(dp=4, ep=3))
    expect_error(tiny, topo, "parallel.ep", "EP size 3", "= 4")


def test_engram_must_divide_model_ranks(tiny):
    topo = tiny_topo(parallel=ParallelSection(dp=4, ep=2, engram=3))
    expect_error(tiny, topo, "parallel.engram", "3", "4")


def test_sizes_must_be_positive(tiny):
    expect_error(tiny, tiny_topo(parallel=ParallelSection(cp=0), hardware=cpu(1)), "parallel.cp")


def test_gpus_must_match_model_ranks(released):
    topo = released_8xh200(parallel=ParallelSection(dp=4, ep=4, engram=4))
    expect_error(released, topo, "hardware.gpus_per_node", "8 * 1 = 8", "4 * 1 = 4")


def test_ep_group_must_not_straddle_nodes(tiny):
    topo = tiny_topo(parallel=ParallelSection(dp=12, ep=4),
                     hardware=HardwareSection(gpus_per_node=6, nodes=2))
    expect_error(tiny, topo, "parallel.ep", "EP size 4", "gpus_per_node 6")


def test_more_ep_ranks_than_experts(tiny):
    topo = tiny_topo(parallel=ParallelSection(dp=16, ep=16))
    expect_error(tiny, topo, "parallel.ep", "16", "8 routed experts")


def test_slots_must_divide_by_ep(tiny):
    topo = tiny_topo(parallel=ParallelSection(dp=4, ep=4), eplb=EplbSection(redundant_experts=2))
    expect_error(tiny, topo, "eplb.redundant_experts", "8 + 2 = 10", "EP size 4")


def test_expert_groups_must_divide_experts(tiny):
    expect_error(tiny, tiny_topo(eplb=EplbSection(expert_groups=3)), "eplb.expert_groups",
                 "3", "8 routed experts")


def test_max_model_len_within_model(tiny):
    topo = tiny_topo(cache=CacheSection(max_model_len_tokens=4097))
    expect_error(tiny, topo, "cache.max_model_len_tokens", "4097", "4096")


@pytest.mark.parametrize("block", [0, 30, 6, 2])
def test_block_size_multiple_of_ratios_and_index_tile(tiny, block):
    # tiny: ratios {1, 2}, index tile 4 tokens -> blocks must be multiples of 4
    topo = tiny_topo(cache=CacheSection(block_size_tokens=block))
    expect_error(tiny, topo, "cache.block_size_tokens", str(block), "lcm 4")


def test_block_size_multiple_of_tile_passes(tiny):
    validate_topology(tiny, tiny_topo(cache=CacheSection(block_size_tokens=4)))


def test_memory_fraction_range(tiny):
    expect_error(tiny, tiny_topo(cache=CacheSection(memory_fraction=1.5)), "cache.memory_fraction")


def test_prefill_chunk_within_token_budget(tiny):
    sched = SchedulerSection(max_num_batched_tokens=1024, prefill_chunk_size_tokens=2048)
    expect_error(tiny, tiny_topo(scheduler=sched), "scheduler.prefill_chunk_size_tokens",
                 "2048", "1024")


def test_dspark_needs_stages(tiny):
    no_stages = dataclasses.replace(tiny, num_nextn_predict_layers=0)
    topo = tiny_topo(speculative=SpeculativeSection("dspark", 2))
    expect_error(no_stages, topo, "speculative.method", "num_nextn_predict_layers is 0")


@pytest.mark.parametrize("method,draft", [("dspark", 0), ("dspark", 4), ("none", 2)])
def test_num_draft_tokens(tiny, method, draft):
    topo = tiny_topo(speculative=SpeculativeSection(method, draft))
    expect_error(tiny, topo, "speculative.num_draft_tokens", str(draft))


def test_dspark_draft_range_passes(tiny):
    for draft in (1, 3):  # tiny dspark_block_size is 3
        validate_topology(tiny, tiny_topo(speculative=SpeculativeSection("dspark", draft)))


def test_weights_must_fit_every_rank(released):
    topo = Topology(model=ModelSection("builtin:v41-flash"), hardware=h200(1), source=SOURCE)
    weights = weight_bytes_per_rank(released, topo)[0]
    usable = int(139 * GIB * 0.9)
    # the whole text checkpoint (474.3 GiB) minus DSpark (7.4 GiB) and image embeddings on one GPU
    assert 466 * GIB < weights < 467 * GIB
    err = expect_error(released, topo, "hardware.memory_bytes", str(weights), str(usable),
                       "GiB")
    assert "rank 0" in err.message


def test_engram_unsharded_does_not_fit_8_h200(released):
    # the two engram tables alone are 189 GiB: every rank holding them cannot fit 125 GiB
    topo = released_8xh200(parallel=ParallelSection(dp=8, ep=8, engram=1))
    expect_error(released, topo, "hardware.memory_bytes")


def test_decode_rows_over_token_budget_warns(tiny):
    sched = SchedulerSection(max_num_seqs=256, max_num_batched_tokens=512,
                             prefill_chunk_size_tokens=512)
    topo = tiny_topo(scheduler=sched, speculative=SpeculativeSection("dspark", 3))
    assert any("1024" in w for w in validate_topology(tiny, topo))
