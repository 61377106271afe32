"""Tests for the EPLB expert-placement pass: the reference README's example, invariants of the
global policy, determinism, input validation and the greedy packing rule."""

import itertools
import random

import pytest
import torch

from deepinfer.planner.passes.place_experts import (
    ExpertPlacement,
    _pack_evenly,
    place_experts,
    uniform_load,
)

# The example of deepseek-ai/EPLB's README: 2 layers x 12 experts, 16 replicas, 4 groups, 2 nodes,
# 8 GPUs, and the phy2log the README prints for it.
README_LOAD = torch.tensor(
    [
        [90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
        [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27],
    ]
)
README_PHY2LOG = torch.tensor(
    [
        [5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
        [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1],
    ]
)


def gpu_loads(placement: ExpertPlacement, load: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """[L, num_gpus] tokens per GPU when each expert's tokens split evenly over its replicas."""
    load = load.float()
    share = load / placement.logcnt  # [L, E]
    slot_load = share.gather(1, placement.phy2log)  # [L, R]
    return slot_load.view(load.shape[0], num_gpus, -1).sum(-1)


def check_invariants(placement: ExpertPlacement, num_logical: int, num_gpus: int) -> None:
    phy2log, log2phy, logcnt = placement.phy2log, placement.log2phy, placement.logcnt
    num_layers, num_replicas = phy2log.shape
    assert phy2log.dtype == log2phy.dtype == logcnt.dtype == torch.int64
    assert logcnt.shape == (num_layers, num_logical)
    assert log2phy.shape == (num_layers, num_logical, int(logcnt.max()))
    assert bool((logcnt >= 1).all()), "every logical expert needs a replica"
    assert torch.equal(logcnt.sum(1), torch.full((num_layers,), num_replicas))
    for layer in range(num_layers):
        assert torch.equal(torch.bincount(phy2log[layer], minlength=num_logical), logcnt[layer])
        seen = []
        for expert in range(num_logical):
            count = int(logcnt[layer, expert])
            slots = log2phy[layer, expert]
            assert bool((slots[count:] == -1).all())
            assert bool((phy2log[layer, slots[:count]] == expert).all())
            seen += slots[:count].tolist()
        assert sorted(seen) == list(range(num_replicas)), "log2phy covers each slot once"
    # Each GPU owns exactly num_replicas / num_gpus consecutive slots, all filled.
    assert phy2log.view(num_layers, num_gpus, -1).shape[2] == num_replicas // num_gpus
    assert bool((phy2log >= 0).all()) and bool((phy2log < num_logical).all())


def test_readme_example_hierarchical() -> None:
    placement = place_experts(README_LOAD, num_replicas=16, num_groups=4, num_nodes=2, num_gpus=8)
    assert placement.policy == "hierarchical"
    assert torch.equal(placement.phy2log, README_PHY2LOG)
    check_invariants(placement, num_logical=12, num_gpus=8)


def test_global_policy_invariants_and_balance() -> None:
    # 3 groups on 2 nodes do not split evenly -> global policy. A skewed (Zipf-like) load.
    num_layers, num_logical, num_replicas, num_gpus = 3, 24, 32, 4
    gen = torch.Generator().manual_seed(0)
    ranks = torch.stack([torch.randperm(num_logical, generator=gen) for _ in range(num_layers)])
    load = 10_000.0 / (ranks.float() + 1.0)
    placement = place_experts(load, num_replicas, num_groups=3, num_nodes=2, num_gpus=num_gpus)
    assert placement.policy == "global"
    check_invariants(placement, num_logical, num_gpus)

    # Naive baseline: experts round-robin, the extra slots to experts 0, 1, ... in index order.
    naive_phy2log = (torch.arange(num_replicas) % num_logical).expand(num_layers, -1)
    naive_count = torch.stack([torch.bincount(r, minlength=num_logical) for r in naive_phy2log])
    naive = ExpertPlacement(naive_phy2log, torch.empty(0), naive_count, "naive")
    eplb_max = gpu_loads(placement, load, num_gpus).max(1).values
    naive_max = gpu_loads(naive, load, num_gpus).max(1).values
    assert bool((eplb_max <= naive_max).all())
    assert bool((eplb_max < naive_max).any())
    # Skewed load: the hottest expert gets more than one replica.
    hottest = load.argmax(1)
    assert bool((placement.logcnt[torch.arange(num_layers), hottest] > 1).all())


@pytest.mark.parametrize(
    "load, args",
    [
        (README_LOAD, (16, 4, 2, 8)),
        (torch.randint(0, 4, (2, 64), generator=torch.Generator().manual_seed(1)), (72, 8, 3, 24)),
        (uniform_load(4, 32), (48, 8, 2, 16)),
    ],
)
def test_deterministic(load: torch.Tensor, args: tuple[int, int, int, int]) -> None:
    first, second = place_experts(load, *args), place_experts(load.clone(), *args)
    assert first.policy == second.policy
    for name in ("phy2log", "log2phy", "logcnt"):
        assert torch.equal(getattr(first, name), getattr(second, name)), name
    check_invariants(first, load.shape[1], args[3])


def test_uniform_load_and_dtype_independence() -> None:
    load = uniform_load(2, 8)
    assert load.shape == (2, 8) and load.dtype == torch.float32
    placement = place_experts(load, num_replicas=8, num_groups=4, num_nodes=2, num_gpus=4)
    assert torch.equal(placement.logcnt, torch.ones(2, 8, dtype=torch.int64))
    as_float = place_experts(README_LOAD.double(), 16, 4, 2, 8)
    assert torch.equal(as_float.phy2log, README_PHY2LOG)


def test_placement_is_frozen() -> None:
    placement = place_experts(README_LOAD, 16, 4, 2, 8)
    with pytest.raises(AttributeError):
        placement.policy = "global"  # type: ignore[misc]


@pytest.mark.parametrize(
    "load, args, words",
    [
        (README_LOAD, (18, 4, 2, 8), ["num_replicas", "18", "num_gpus", "8"]),
        (README_LOAD, (16, 4, 3, 8), ["num_gpus", "8", "num_nodes", "3"]),
        (README_LOAD, (8, 4, 2, 8), ["num_replicas", "8", "num_logical_experts", "12"]),
        (README_LOAD, (16, 8, 2, 8), ["num_logical_experts", "12", "num_groups", "8"]),
        (README_LOAD[0], (16, 4, 2, 8), ["load", "shape", "(12,)"]),
        (README_LOAD, (16, 0, 2, 8), ["num_groups", "0"]),
        (README_LOAD.float() * -1, (16, 4, 2, 8), ["load", "non-negative"]),
        (torch.full((1, 4), float("nan")), (4, 2, 2, 2), ["load", "finite"]),
    ],
)
def test_errors_name_parameters(
    load: torch.Tensor, args: tuple[int, int, int, int], words: list[str]
) -> None:
    with pytest.raises(ValueError) as info:
        place_experts(load, *args)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def greedy_by_hand(weights: list[float], num_packs: int) -> tuple[list[int], list[int]]:
    """Independent statement of the packing rule for distinct weights: heaviest item first, into
    the lightest pack that is not full (lowest index on ties)."""
    capacity = len(weights) // num_packs
    packs: list[list[int]] = [[] for _ in range(num_packs)]
    for item in sorted(range(len(weights)), key=lambda i: -weights[i]):
        open_packs = [p for p in range(num_packs) if len(packs[p]) < capacity]
        target = min(open_packs, key=lambda p: (sum(weights[i] for i in packs[p]), p))
        packs[target].append(item)
    pack_of = [0] * len(weights)
    position = [0] * len(weights)
    for p, items in enumerate(packs):
        for k, item in enumerate(items):
            pack_of[item], position[item] = p, k
    return pack_of, position


def best_max_load(weights: list[float], num_packs: int) -> float:
    """Brute force: the smallest possible heaviest pack over all equal-size partitions."""
    capacity = len(weights) // num_packs
    best = float("inf")
    for labels in itertools.product(range(num_packs), repeat=len(weights)):
        if any(labels.count(p) != capacity for p in range(num_packs)):
            continue
        heaviest = max(
            sum(w for w, lab in zip(weights, labels, strict=True) if lab == p)
            for p in range(num_packs)
        )
        best = min(best, heaviest)
    return best


@pytest.mark.parametrize("num_items, num_packs", [(4, 2), (6, 2), (6, 3), (8, 2)])
def test_pack_evenly_matches_rule_and_brute_force(num_items: int, num_packs: int) -> None:
    rng = random.Random(num_items * 10 + num_packs)
    for _ in range(10):
        # Distinct integers keep float32 sums exact and the descending order unambiguous.
        weights = [float(w) for w in rng.sample(range(1, 1000), num_items)]
        pack, position = _pack_evenly(torch.tensor(weights), num_packs)
        assert (pack.tolist(), position.tolist()) == greedy_by_hand(weights, num_packs)
        capacity = num_items // num_packs
        assert torch.equal(
            torch.bincount(pack, minlength=num_packs), torch.full((num_packs,), capacity)
        )
        heaviest = max(
            sum(w for w, p in zip(weights, pack.tolist(), strict=True) if p == q)
            for q in range(num_packs)
        )
        optimum = best_max_load(weights, num_packs)
        assert optimum <= heaviest <= optimum + max(weights)


def test_pack_evenly_one_item_per_pack_is_identity() -> None:
    pack, position = _pack_evenly(torch.tensor([1.0, 9.0, 5.0]), 3)
    assert pack.tolist() == [0, 1, 2] and position.tolist() == [0, 0, 0]
