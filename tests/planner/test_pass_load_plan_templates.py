"""plan_load_templates: hand-checked templates for the released layout, and the templates'
segment bounds against the C++ builders of deepinfer._C."""

import numpy as np

from deepinfer.planner.passes.cache_layout import plan_cache_layout
from deepinfer.planner.passes.load_plan_templates import plan_load_templates
from deepinfer.planner.passes.shard_map import weight_bytes_per_rank
from deepinfer.planner.topology import CacheSection, ModelSection, ParallelSection, Topology


def layout(spec, **topo_fields):
    topo = Topology(model=ModelSection("builtin:tiny"), **topo_fields)
    return plan_cache_layout(spec, topo, weight_bytes_per_rank(spec, topo))


def test_released_templates_by_hand(released):
    cache = layout(released, cache=CacheSection(max_model_len_tokens=65536))
    plan = plan_load_templates(released, cache)
    window, c2, k2, c1, k1 = plan["templates"]
    assert window == {"kind": "window", "layout": "ring", "builder": "build_ring_load_plan",
                      "layers": list(range(40)), "record_bytes": 528, "compress_ratio": 0,
                      "entries_per_block": None, "ring_len": 128, "view_len": 128,
                      "max_segments_per_seq": 2}
    # ratio 2: 32 entries per 64-token block; 65536 tokens = 1024 blocks -> 32768 entries
    assert (c2["kind"], c2["layers"], c2["record_bytes"], c2["entries_per_block"],
            c2["view_len"], c2["max_segments_per_seq"]) == (
        "compressed", [2, 8, 14], 288, 32, 32768, 1025)
    assert (k2["kind"], k2["record_bytes"]) == ("index_keys", 68)
    assert (c1["layers"], c1["entries_per_block"], c1["view_len"], c1["max_segments_per_seq"]) \
        == ([20], 64, 65536, 1025)
    assert k1["builder"] == "build_paged_load_plan" and k1["ring_len"] is None
    assert plan["max_segments_per_step_per_seq"] == 40 * 2 + 3 * 2 * 1025 + 2 * 1025


def test_cp_halves_the_view(tiny):
    plan = plan_load_templates(tiny, layout(tiny, parallel=ParallelSection(cp=2)))
    paged = [t for t in plan["templates"] if t["layout"] == "paged"]
    # tiny: 4096 tokens = 64 blocks, 32 per CP rank
    assert [t["view_len"] for t in paged] == [32 * 32, 32 * 32, 32 * 64, 32 * 64]


def test_bounds_match_the_cpp_builders(tiny):
    from deepinfer import _C

    plan = plan_load_templates(tiny, layout(tiny))
    for t in plan["templates"]:
        if t["layout"] == "ring":
            out = np.zeros(4 * t["max_segments_per_seq"], dtype=np.int32)
            for tokens in (0, 3, 8, 13):
                assert _C.build_ring_load_plan(out, 1, t["ring_len"], tokens) <= \
                    t["max_segments_per_seq"]
            continue
        epb, view = t["entries_per_block"], t["view_len"]
        assert _C.max_paged_segments(view, epb) == t["max_segments_per_seq"]
        out = np.zeros(4 * t["max_segments_per_seq"], dtype=np.int32)
        table = list(range(1, view // epb + 1))
        for entries in (0, 1, epb, view - 1, view):
            n = _C.build_paged_load_plan(out, table, epb, entries, view)
            assert n <= t["max_segments_per_seq"]


def test_deterministic(tiny):
    cache = layout(tiny)
    assert plan_load_templates(tiny, cache) == plan_load_templates(tiny, cache)
