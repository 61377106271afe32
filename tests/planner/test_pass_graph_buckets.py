"""plan_graph_buckets: the padding-waste bound for every batch size, DSpark verify rows, prefill
token buckets within the token budget, scheduler modes."""

import pytest

from deepinfer.artifacts.model_spec import load_model_spec
from deepinfer.planner.passes.graph_buckets import (
    MAX_PADDING_WASTE,
    decode_buckets,
    padding_waste,
    plan_graph_buckets,
)
from deepinfer.planner.topology import ModelSection, SchedulerSection, SpeculativeSection, Topology

TINY = load_model_spec("builtin:tiny")


def topo(max_num_seqs=256, max_num_batched_tokens=8192, mode="normal", draft=0) -> Topology:
    sched = SchedulerSection(max_num_seqs=max_num_seqs, mode=mode,
                             max_num_batched_tokens=max_num_batched_tokens,
                             prefill_chunk_size_tokens=min(4096, max_num_batched_tokens))
    spec_dec = SpeculativeSection("dspark", draft) if draft else SpeculativeSection()
    return Topology(model=ModelSection("builtin:tiny"), scheduler=sched, speculative=spec_dec)


def test_small_sizes_by_hand():
    assert decode_buckets(1) == [1]
    # 6 -> 8: worst batch 7 wastes 1/8; 8 -> 10 (9 wastes 1/10) ... 20 -> 24 (21 wastes 3/24)
    assert decode_buckets(32) == [1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32]
    assert padding_waste(7, [6, 8]) == 0.125
    assert padding_waste(21, decode_buckets(32)) == 3 / 24


@pytest.mark.parametrize("max_num_seqs", [1, 2, 7, 9, 100, 256, 1000, 4096])
def test_waste_bound_for_every_batch(max_num_seqs):
    plan = plan_graph_buckets(TINY, topo(max_num_seqs=max_num_seqs,
                                         max_num_batched_tokens=max(8192, max_num_seqs)))
    buckets = plan["decode"]
    assert buckets == sorted(set(buckets)) and buckets[-1] == max_num_seqs and buckets[0] == 1
    for b in range(1, max_num_seqs + 1):
        assert padding_waste(b, buckets) <= MAX_PADDING_WASTE, b
    assert plan["max_padding_waste"] == 0.125
    assert plan["decode_padding_waste"] <= 0.125


def test_bucket_count_stays_small():
    assert len(decode_buckets(256)) == 36
    assert len(decode_buckets(4096)) < 80


def test_dspark_verify_rows_and_token_cap():
    plan = plan_graph_buckets(TINY, topo(max_num_seqs=256, max_num_batched_tokens=512, draft=3))
    assert plan["rows_per_seq"] == 4
    assert plan["decode"][-1] == 128  # 512 tokens / 4 rows per sequence
    assert plan["verify"] == [4 * b for b in plan["decode"]]
    assert max(plan["verify"]) <= 512


def test_prefill_buckets_within_token_budget():
    plan = plan_graph_buckets(TINY, topo(max_num_batched_tokens=3000))
    assert plan["prefill_tokens"] == [16, 32, 64, 128, 256, 512, 1024, 2048, 3000]
    assert plan["verify"] == []


def test_modes():
    assert plan_graph_buckets(TINY, topo(mode="prompt"))["decode"] == []
    assert plan_graph_buckets(TINY, topo(mode="completion"))["prefill_tokens"] == []


def test_deterministic():
    assert plan_graph_buckets(TINY, topo()) == plan_graph_buckets(TINY, topo())
