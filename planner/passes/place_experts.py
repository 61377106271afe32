"""Expert placement: which logical MoE expert each physical expert slot holds, on which GPU.

This pass reproduces, placement for placement, DeepSeek's expert-parallelism load balancer
(EPLB, `deepseek-ai/EPLB`). Given how many tokens each logical expert received in each MoE
layer, it decides how many replicas every expert gets and where each replica lives, so that
GPUs (and, under the hierarchical policy, nodes) carry similar loads.

Vocabulary (all indices are int64):

- *logical expert*: an expert of the model, ``0 <= e < num_logical_experts``.
- *physical expert* (slot, replica): one copy of a logical expert's weights on one GPU,
  ``0 <= p < num_replicas``. GPU ``g`` owns slots ``[g * k, (g + 1) * k)`` with
  ``k = num_replicas // num_gpus``; node ``n`` owns a contiguous run of GPUs the same way.
- ``phy2log[l, p]``: the logical expert that slot ``p`` holds in layer ``l``.
- ``logcnt[l, e]``: how many slots hold expert ``e`` in layer ``l`` (at least 1).
- ``log2phy[l, e, r]``: the slot holding the ``r``-th replica of ``e`` (replicas are numbered
  in the order they were created), ``-1`` where ``r >= logcnt[l, e]``.

Policies (the reference's rule): when the expert groups split evenly across nodes
(``num_groups % num_nodes == 0``) the *hierarchical* policy first spreads groups over nodes,
so that group-limited routing keeps most traffic inside a node, then replicates and packs
within each node. Otherwise the *global* policy treats the cluster as one node with one group.

Tie-breaking follows the reference exactly: equal loads are ordered by torch's default CPU
``sort`` (which is not stable for longer rows), the lightest pack with the lowest index wins,
and the hottest expert with the lowest index gets the next replica. Loads are handled in
float32, as in the reference, so that sums and ratios round identically.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["ExpertPlacement", "place_experts", "uniform_load"]

HIERARCHICAL = "hierarchical"
GLOBAL = "global"


@dataclass(frozen=True)
class ExpertPlacement:
    """Where every replica of every logical expert lives, per MoE layer.

    Attributes:
        phy2log: [num_layers, num_replicas] int64, logical expert held by each physical slot.
        log2phy: [num_layers, num_logical_experts, max_replicas] int64, physical slots of each
            logical expert in replica order, padded with -1. ``max_replicas`` is the largest
            replica count over all layers and experts.
        logcnt: [num_layers, num_logical_experts] int64, replica count of each logical expert.
        policy: "hierarchical" or "global", the EPLB policy that produced the placement.
    """

    phy2log: torch.Tensor
    log2phy: torch.Tensor
    logcnt: torch.Tensor
    policy: str

    @property
    def num_layers(self) -> int:
        return self.phy2log.shape[0]

    @property
    def num_replicas(self) -> int:
        return self.phy2log.shape[1]

    @property
    def max_replicas(self) -> int:
        return self.log2phy.shape[2]


def uniform_load(num_layers: int, num_experts: int) -> torch.Tensor:
    """A load in which every expert of every layer received the same number of tokens.

    Use it when no routing statistics exist yet. Returns: [num_layers, num_experts] float32 ones.
    """
    if num_layers < 1 or num_experts < 1:
        raise ValueError(
            f"uniform_load needs num_layers >= 1 and num_experts >= 1, "
            f"got num_layers={num_layers}, num_experts={num_experts}"
        )
    return torch.ones(num_layers, num_experts, dtype=torch.float32)


def place_experts(
    load: torch.Tensor, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int
) -> ExpertPlacement:
    """Replicate and place experts with DeepSeek's EPLB policies. Pure and deterministic; CPU.

    Args:
        load: [num_layers, num_logical_experts], tokens routed to each logical expert (any real
            or integer dtype, any device; finite and non-negative).
        num_replicas: number of physical expert slots per layer, a multiple of ``num_gpus`` and
            at least ``num_logical_experts``.
        num_groups: number of expert groups (of consecutive experts) used by group-limited
            routing; must divide ``num_logical_experts`` when the hierarchical policy applies.
        num_nodes: number of server nodes (fast links inside a node, slow ones between).
        num_gpus: total number of GPUs, a multiple of ``num_nodes``.

    Returns:
        An ``ExpertPlacement`` (shapes in its docstring), on the CPU.

    Raises:
        ValueError: naming the offending parameter and values when the inputs are inconsistent.
    """
    _check_arguments(load, num_replicas, num_groups, num_nodes, num_gpus)
    load = load.detach().to(device="cpu", dtype=torch.float32)
    num_layers, num_logical = load.shape

    if num_groups % num_nodes == 0:
        policy, groups, nodes = HIERARCHICAL, num_groups, num_nodes
    else:
        # The global policy is the hierarchical one on a single node with a single group.
        policy, groups, nodes = GLOBAL, 1, 1

    # Group loads are summed for all layers at once, the same reduction as the reference.
    group_load = load.reshape(num_layers, groups, num_logical // groups).sum(-1)  # [L, groups]
    phy2log = torch.empty(num_layers, num_replicas, dtype=torch.int64)
    replica_rank = torch.empty(num_layers, num_replicas, dtype=torch.int64)
    for layer in range(num_layers):
        phy2log[layer], replica_rank[layer] = _place_layer(
            load[layer], group_load[layer], num_replicas, nodes, num_gpus
        )

    logcnt = torch.stack([torch.bincount(row, minlength=num_logical) for row in phy2log])
    log2phy = _replica_table(phy2log, replica_rank, logcnt)
    return ExpertPlacement(phy2log=phy2log, log2phy=log2phy, logcnt=logcnt, policy=policy)


def _place_layer(
    expert_load: torch.Tensor,
    group_load: torch.Tensor,
    num_replicas: int,
    num_nodes: int,
    num_gpus: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Place one layer hierarchically: groups onto nodes, replicas within nodes, onto GPUs.

    Args:
        expert_load: [num_logical_experts] float32.
        group_load: [num_groups] float32, summed load of each group of consecutive experts.
        num_replicas, num_nodes, num_gpus: as in ``place_experts`` (already validated).

    Returns:
        slot_expert: [num_replicas] int64, logical expert of each physical slot.
        slot_rank: [num_replicas] int64, which replica of its expert each slot is (0-based,
            in creation order).
    """
    num_logical = expert_load.numel()
    num_groups = group_load.numel()
    group_size = num_logical // num_groups
    experts_per_node = num_logical // num_nodes
    replicas_per_node = num_replicas // num_nodes
    gpus_per_node = num_gpus // num_nodes
    replicas_per_gpu = num_replicas // num_gpus

    # Step 1: pack groups onto nodes, then list the experts node by node ("node order"): node n
    # holds positions [n * experts_per_node, (n + 1) * experts_per_node), groups in pack order.
    group_node, group_slot = _pack_evenly(group_load, num_nodes)  # [num_groups] each
    group_position = group_node * (num_groups // num_nodes) + group_slot  # [num_groups]
    expert_position = (  # [num_logical], logical expert -> position in node order
        group_position.unsqueeze(-1) * group_size + torch.arange(group_size)
    ).flatten()
    expert_at_position = _invert(expert_position)  # [num_logical], position -> logical expert

    slot_expert = torch.empty(num_replicas, dtype=torch.int64)
    slot_rank = torch.empty(num_replicas, dtype=torch.int64)
    for node in range(num_nodes):
        node_experts = expert_at_position[node * experts_per_node : (node + 1) * experts_per_node]
        node_load = expert_load[node_experts]  # [experts_per_node]

        # Step 2: give the node's extra slots to its hottest experts, one replica at a time.
        local_expert, local_rank, copies = _replicate_hottest(node_load, replicas_per_node)

        # Step 3: pack the node's replicas onto its GPUs; a replica carries its expert's load
        # divided evenly among the expert's copies.
        replica_load = (node_load / copies)[local_expert]  # [replicas_per_node]
        gpu, position_on_gpu = _pack_evenly(replica_load, gpus_per_node)
        slot = node * replicas_per_node + gpu * replicas_per_gpu + position_on_gpu
        slot_expert[slot] = node_experts[local_expert]
        slot_rank[slot] = local_rank
    return slot_expert, slot_rank


def _pack_evenly(item_load: torch.Tensor, num_packs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split n items into ``num_packs`` packs of exactly n / num_packs items, balancing load.

    Greedy longest-processing-time: items in descending load (torch's default sort order on
    ties), each into the currently lightest pack that still has room (lowest index on ties).
    When each pack holds one item, item i simply goes to pack i.

    Args:
        item_load: [n] float32, n a multiple of num_packs.

    Returns:
        pack: [n] int64, the pack of each item.
        position: [n] int64, the order in which the item entered its pack (0-based).
    """
    num_items = item_load.numel()
    capacity = num_items // num_packs
    if capacity == 1:
        return torch.arange(num_items), torch.zeros(num_items, dtype=torch.int64)

    heaviest_first = torch.sort(item_load, descending=True).indices.tolist()
    item_weight = item_load.numpy()  # float32: pack sums round like the reference's
    pack_weight = [np.float32(0.0)] * num_packs
    pack_count = [0] * num_packs
    pack = torch.empty(num_items, dtype=torch.int64)
    position = torch.empty(num_items, dtype=torch.int64)
    for item in heaviest_first:
        lightest = -1
        for candidate in range(num_packs):
            if pack_count[candidate] == capacity:
                continue
            if lightest < 0 or pack_weight[candidate] < pack_weight[lightest]:
                lightest = candidate
        pack[item] = lightest
        position[item] = pack_count[lightest]
        pack_weight[lightest] = pack_weight[lightest] + item_weight[item]
        pack_count[lightest] += 1
    return pack, position


def _replicate_hottest(
    expert_load: torch.Tensor, num_slots: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fill ``num_slots`` slots with m experts so that the largest per-replica load is minimal.

    Slot i < m holds expert i; every further slot goes to the expert whose load per existing
    replica is largest (lowest index on ties).

    Args:
        expert_load: [m] float32, m <= num_slots.

    Returns:
        slot_expert: [num_slots] int64, expert of each slot.
        slot_rank: [num_slots] int64, the replica number of the slot within its expert.
        copies: [m] int64, replicas per expert.
    """
    num_experts = expert_load.numel()
    slot_expert = torch.cat(
        [torch.arange(num_experts), torch.empty(num_slots - num_experts, dtype=torch.int64)]
    )
    slot_rank = torch.zeros(num_slots, dtype=torch.int64)
    copies = torch.ones(num_experts, dtype=torch.int64)
    for slot in range(num_experts, num_slots):
        hottest = int(torch.argmax(expert_load / copies))
        slot_expert[slot] = hottest
        slot_rank[slot] = copies[hottest]
        copies[hottest] += 1
    return slot_expert, slot_rank, copies


def _invert(permutation: torch.Tensor) -> torch.Tensor:
    """[n] int64 permutation -> [n] int64 inverse, so that inverse[permutation[i]] == i."""
    inverse = torch.empty_like(permutation)
    inverse[permutation] = torch.arange(permutation.numel())
    return inverse


def _replica_table(
    phy2log: torch.Tensor, replica_rank: torch.Tensor, logcnt: torch.Tensor
) -> torch.Tensor:
    """Build log2phy from phy2log.

    Args:
        phy2log: [L, R] int64. replica_rank: [L, R] int64. logcnt: [L, E] int64.

    Returns:
        [L, E, max(logcnt)] int64: entry [l, e, r] is the slot holding replica r of e, else -1.
    """
    num_layers, num_replicas = phy2log.shape
    max_replicas = int(logcnt.max())
    table = torch.full((num_layers, logcnt.shape[1], max_replicas), -1, dtype=torch.int64)
    layer = torch.arange(num_layers).unsqueeze(-1).expand(-1, num_replicas)
    table[layer, phy2log, replica_rank] = torch.arange(num_replicas).expand(num_layers, -1)
    return table


def _check_arguments(
    load: torch.Tensor, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int
) -> None:
    """Raise ValueError, naming the parameter and the values, for inconsistent inputs."""
    if not isinstance(load, torch.Tensor):
        raise ValueError(f"load must be a torch.Tensor, got {type(load).__name__}")
    if load.dim() != 2 or load.shape[0] < 1 or load.shape[1] < 1:
        raise ValueError(
            f"load must have shape [num_layers >= 1, num_logical_experts >= 1], "
            f"got shape {tuple(load.shape)}"
        )
    if load.dtype == torch.bool or load.is_complex():
        raise ValueError(f"load must hold real or integer token counts, got dtype {load.dtype}")
    for name, value in (
        ("num_replicas", num_replicas),
        ("num_groups", num_groups),
        ("num_nodes", num_nodes),
        ("num_gpus", num_gpus),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    as_float = load.detach().to(device="cpu", dtype=torch.float32)
    if not bool(torch.isfinite(as_float).all()) or bool((as_float < 0).any()):
        raise ValueError("load must be finite and non-negative")

    num_logical = load.shape[1]
    if num_replicas < num_logical:
        raise ValueError(
            f"num_replicas ({num_replicas}) must be at least num_logical_experts "
            f"({num_logical}): every expert needs a slot"
        )
    if num_gpus % num_nodes != 0:
        raise ValueError(f"num_gpus ({num_gpus}) must be divisible by num_nodes ({num_nodes})")
    if num_replicas % num_gpus != 0:
        raise ValueError(
            f"num_replicas ({num_replicas}) must be divisible by num_gpus ({num_gpus})"
        )
    if num_groups % num_nodes == 0 and num_logical % num_groups != 0:
        raise ValueError(
            f"num_logical_experts ({num_logical}) must be divisible by num_groups "
            f"({num_groups}) for the hierarchical policy (num_groups % num_nodes == 0)"
        )
