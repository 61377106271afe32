"""Rank groups: where each model rank runs and which DP / CP / EP / engram group it is in.

Global rank ``r`` runs on node ``r // gpus_per_node``, local GPU ``r % gpus_per_node``. Ranks
are numbered DP-major, CP-minor (``r = dp_rank * cp + cp_rank``) so that the ranks sharing a
sequence's context (a CP group) are neighbours, on one node when ``cp <= gpus_per_node``: CP
exchanges attention partials every layer, the most latency-sensitive traffic. EP groups and
engram groups are contiguous runs of ``ep`` (``engram``) ranks, again to keep their all-to-all
and row gathers inside a node where they fit (architecture §7: "EP groups are contiguous
partitions of the DP·CP model ranks"). ``validate_topology`` checks the divisibility rules.
"""

from __future__ import annotations

from deepinfer.planner.topology import Topology

__all__ = ["plan_rank_groups"]


def plan_rank_groups(topo: Topology) -> dict:
    """Returns ``{"world_size", "ranks": [{"rank", "node", "local_gpu", "dp_rank", "cp_rank",
    "ep_group", "ep_rank", "engram_group", "engram_shard"}...], "dp_groups", "cp_groups",
    "ep_groups", "engram_groups"}``; each ``*_groups`` is a list of lists of global ranks.

    A DP group is the set of ranks with the same ``cp_rank`` (one per DP replica: they vote on
    the phase together); a CP group is the ``cp`` ranks of one DP replica.
    """
    p, hw = topo.parallel, topo.hardware
    world = topo.world_size
    gpus_per_node = max(hw.gpus_per_node, 1)
    ranks = []
    for r in range(world):
        ranks.append({
            "rank": r,
            "node": r // gpus_per_node,
            "local_gpu": r % gpus_per_node,
            "dp_rank": r // p.cp,
            "cp_rank": r % p.cp,
            "ep_group": r // p.ep,
            "ep_rank": r % p.ep,
            "engram_group": r // p.engram,
            "engram_shard": r % p.engram,
        })
    return {
        "world_size": world,
        "ranks": ranks,
        "dp_groups": [list(range(c, world, p.cp)) for c in range(p.cp)],
        "cp_groups": _contiguous(world, p.cp),
        "ep_groups": _contiguous(world, p.ep),
        "engram_groups": _contiguous(world, p.engram),
    }


def _contiguous(world: int, size: int) -> list[list[int]]:
    """``[[0..size-1], [size..2*size-1], ...]`` over ``world`` ranks."""
    return [list(range(start, start + size)) for start in range(0, world, size)]
