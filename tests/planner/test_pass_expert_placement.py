"""plan_expert_placement: load-statistics files give the same placement as calling place_experts
directly; uniform load otherwise; every bad file is a TopologyError naming the file."""

import json

import pytest
import torch

from deepinfer.planner.errors import TopologyError
from deepinfer.planner.passes.expert_placement import ep_num_nodes, plan_expert_placement
from deepinfer.planner.passes.place_experts import place_experts, uniform_load
from deepinfer.planner.topology import (
    EplbSection,
    HardwareSection,
    ModelSection,
    ParallelSection,
    Topology,
)

# tiny: 8 backbone MoE layers x 8 routed experts; 2 DSpark stages x 4 experts
LOAD = [[(7 * layer + 13 * e) % 23 + e * layer for e in range(8)] for layer in range(8)]


def topo(tmp_path=None, dp=2, ep=2, gpus_per_node=2, nodes=1, **eplb) -> Topology:
    return Topology(model=ModelSection("builtin:tiny"),
                    hardware=HardwareSection(gpus_per_node=gpus_per_node, nodes=nodes),
                    parallel=ParallelSection(dp=dp, ep=ep), eplb=EplbSection(**eplb),
                    base_dir=str(tmp_path) if tmp_path else ".")


def as_lists(p):
    return {"phy2log": p.phy2log.tolist(), "log2phy": p.log2phy.tolist(),
            "logcnt": p.logcnt.tolist()}


def test_uniform_equals_place_experts(tiny):
    plan = plan_expert_placement(tiny, topo())
    direct = place_experts(uniform_load(8, 8), num_replicas=8, num_groups=1, num_nodes=1,
                           num_gpus=2)
    assert plan["prefill"] == as_lists(direct) == plan["decode"]
    assert plan["policy"] == direct.policy
    assert plan["num_physical_experts"] == 8 and plan["experts_per_rank"] == 4
    assert plan["load_sources"] == {"prefill": "uniform", "decode": "uniform"}


def test_load_stats_file_equals_place_experts(tiny, tmp_path):
    (tmp_path / "prefill.json").write_text(json.dumps({"load": LOAD}))
    plan = plan_expert_placement(tiny, topo(tmp_path, redundant_experts=2,
                                            load_stats="prefill.json"))
    direct = place_experts(torch.tensor(LOAD), num_replicas=10, num_groups=1, num_nodes=1,
                           num_gpus=2)
    assert plan["prefill"] == as_lists(direct)
    assert plan["decode"] == plan["prefill"]  # decode falls back to the prefill statistics
    assert plan["experts_per_rank"] == 5
    # the hottest experts got the two redundant slots
    assert sum(c - 1 for c in plan["prefill"]["logcnt"][0]) == 2


def test_separate_decode_stats(tiny, tmp_path):
    decode_load = [list(reversed(row)) for row in LOAD]
    (tmp_path / "p.json").write_text(json.dumps({"load": LOAD}))
    (tmp_path / "d.json").write_text(json.dumps({"load": decode_load}))
    plan = plan_expert_placement(tiny, topo(tmp_path, load_stats="p.json",
                                            decode_load_stats="d.json"))
    direct = place_experts(torch.tensor(decode_load), 8, 1, 1, 2)
    assert plan["decode"] == as_lists(direct)
    assert plan["load_sources"] == {"prefill": "p.json", "decode": "d.json"}


def test_absolute_path_and_floats(tiny, tmp_path):
    path = tmp_path / "abs.json"
    path.write_text(json.dumps({"load": [[x + 0.5 for x in row] for row in LOAD]}))
    plan = plan_expert_placement(tiny, topo(None, load_stats=str(path)))
    direct = place_experts(torch.tensor(LOAD, dtype=torch.float64) + 0.5, 8, 1, 1, 2)
    assert plan["prefill"] == as_lists(direct)


@pytest.mark.parametrize("content,fragment", [
    ("{not json", "not valid JSON"),
    (json.dumps([1, 2]), "expected an object"),
    (json.dumps({"loads": LOAD}), "expected an object"),
    (json.dumps({"load": LOAD[:7]}), "expected 8 rows"),
    (json.dumps({"load": [row[:7] for row in LOAD]}), "row 0: expected 8 entries"),
    (json.dumps({"load": [[-1] * 8] + LOAD[1:]}), "row 0, expert 0"),
    (json.dumps({"load": LOAD[:7] + [["x"] * 8]}), "row 7, expert 0"),
    (json.dumps({"load": LOAD[:7] + [[True] * 8]}), "row 7, expert 0"),
    ('{"load": [' + ",".join(["[NaN,1,1,1,1,1,1,1]"] * 8) + "]}", "finite"),
])
def test_bad_load_stats_file(tiny, tmp_path, content, fragment):
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(TopologyError) as info:
        plan_expert_placement(tiny, topo(tmp_path, load_stats="bad.json"))
    assert info.value.source == str(tmp_path / "bad.json")
    assert info.value.field == "load"
    assert fragment in info.value.message


def test_missing_file(tiny, tmp_path):
    with pytest.raises(TopologyError) as info:
        plan_expert_placement(tiny, topo(tmp_path, decode_load_stats="missing.json"))
    assert info.value.source == str(tmp_path / "missing.json")
    assert "cannot read" in info.value.message


def test_policy_follows_nodes_of_the_ep_group(tiny):
    # EP group of 4 over 2 nodes of 2 GPUs: 2 expert groups split over 2 nodes -> hierarchical
    t = topo(dp=4, ep=4, gpus_per_node=2, nodes=2, expert_groups=2)
    assert ep_num_nodes(t) == 2
    assert plan_expert_placement(tiny, t)["policy"] == "hierarchical"
    # one group cannot be split over 2 nodes -> global
    assert plan_expert_placement(tiny, topo(dp=4, ep=4, gpus_per_node=2, nodes=2))["policy"] \
        == "global"
    # EP group inside one node
    assert ep_num_nodes(topo(dp=4, ep=2, gpus_per_node=2, nodes=2)) == 1


def test_dspark_placed_separately(tiny):
    plan = plan_expert_placement(tiny, topo())
    d = plan["dspark"]
    assert d["num_logical_experts"] == 4 and d["num_physical_experts"] == 4
    assert d["phy2log"] == as_lists(place_experts(uniform_load(2, 4), 4, 1, 1, 2))["phy2log"]
    # more EP ranks than DSpark experts: slots rounded up to a multiple of ep, replicas fill them
    plan8 = plan_expert_placement(tiny, topo(dp=8, ep=8, gpus_per_node=8))
    assert plan8["dspark"]["num_physical_experts"] == 8
    assert plan8["dspark"]["experts_per_rank"] == 1
    assert sorted(plan8["dspark"]["logcnt"][0]) == [2, 2, 2, 2]


def test_invariants_and_determinism(tiny, tmp_path):
    (tmp_path / "p.json").write_text(json.dumps({"load": LOAD}))
    t = topo(tmp_path, dp=4, ep=4, gpus_per_node=4, redundant_experts=4, load_stats="p.json")
    plan = plan_expert_placement(tiny, t)
    assert plan == plan_expert_placement(tiny, t)
    for layer, row in enumerate(plan["prefill"]["phy2log"]):
        assert len(row) == 12 and sorted(set(row)) == list(range(8))
        for e, count in enumerate(plan["prefill"]["logcnt"][layer]):
            slots = plan["prefill"]["log2phy"][layer][e]
            assert [row[s] for s in slots[:count]] == [e] * count
            assert all(s == -1 for s in slots[count:])
    assert json.loads(json.dumps(plan)) == plan


def test_unvalidated_topology_is_a_topology_error(tiny):
    # 8 slots cannot be split over 3 EP ranks (validate_topology reports it first, by field)
    t = topo(dp=3, ep=3, gpus_per_node=3)
    with pytest.raises(TopologyError) as info:
        plan_expert_placement(tiny, t)
    assert info.value.field == "eplb" and "num_replicas (8)" in info.value.message
