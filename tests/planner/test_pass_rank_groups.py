"""plan_rank_groups: hand-checked rank table and the partition invariants of every group kind."""

import pytest

from deepinfer.planner.passes.rank_groups import plan_rank_groups
from deepinfer.planner.topology import HardwareSection, ModelSection, ParallelSection, Topology


def topo(dp, cp, ep, engram, gpus_per_node, nodes) -> Topology:
    return Topology(model=ModelSection("builtin:tiny"),
                    hardware=HardwareSection(device="h200", gpus_per_node=gpus_per_node,
                                             nodes=nodes, sm_arch=90),
                    parallel=ParallelSection(dp=dp, cp=cp, ep=ep, engram=engram))


def test_hand_checked_dp2_cp2():
    groups = plan_rank_groups(topo(dp=2, cp=2, ep=4, engram=2, gpus_per_node=2, nodes=2))
    assert groups["world_size"] == 4
    assert groups["ranks"][3] == {"rank": 3, "node": 1, "local_gpu": 1, "dp_rank": 1,
                                  "cp_rank": 1, "ep_group": 0, "ep_rank": 3, "engram_group": 1,
                                  "engram_shard": 1}
    assert groups["ranks"][2]["node"] == 1 and groups["ranks"][2]["dp_rank"] == 1
    assert groups["dp_groups"] == [[0, 2], [1, 3]]
    assert groups["cp_groups"] == [[0, 1], [2, 3]]
    assert groups["ep_groups"] == [[0, 1, 2, 3]]
    assert groups["engram_groups"] == [[0, 1], [2, 3]]


@pytest.mark.parametrize("dp,cp,ep,engram,gpn,nodes", [
    (1, 1, 1, 1, 1, 1), (8, 1, 8, 8, 8, 1), (4, 4, 8, 2, 8, 2), (16, 1, 4, 16, 8, 2)])
def test_groups_partition_the_ranks(dp, cp, ep, engram, gpn, nodes):
    groups = plan_rank_groups(topo(dp, cp, ep, engram, gpn, nodes))
    world = dp * cp
    for kind, size in (("dp_groups", dp), ("cp_groups", cp), ("ep_groups", ep),
                       ("engram_groups", engram)):
        flat = sorted(r for g in groups[kind] for r in g)
        assert flat == list(range(world)), kind
        assert all(len(g) == size for g in groups[kind]), kind
    for r in groups["ranks"]:
        assert r["rank"] == r["dp_rank"] * cp + r["cp_rank"]
        assert r["rank"] == r["node"] * gpn + r["local_gpu"]
        assert groups["ep_groups"][r["ep_group"]][r["ep_rank"]] == r["rank"]
        assert groups["engram_groups"][r["engram_group"]][r["engram_shard"]] == r["rank"]
        assert r["rank"] in groups["cp_groups"][r["dp_rank"]]
        assert r["rank"] in groups["dp_groups"][r["cp_rank"]]


def test_deterministic():
    t = topo(4, 2, 4, 2, 8, 1)
    assert plan_rank_groups(t) == plan_rank_groups(t)
