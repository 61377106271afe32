"""Process groups of a multi-rank plan (``rank_groups``), the DP vote and the EP exchange.

Ranks are started the way ``torchrun`` starts them — environment ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT`` — by torchrun itself or by ``deepinfer-run``'s launcher
(``runtime/launcher.py``), and join one gloo world (CPU; NCCL on GPUs is not implemented yet).
Every rank creates every group of ``rank_groups`` in plan order (``new_group`` is collective)
and keeps its own:

  * the DP group: ``allreduce_max`` (elementwise MAX of a list of ints) for the scheduler's
    two-stage phase vote, so every DP rank runs the same phase each step;
  * the EP group: :class:`EPExchange`, the MoE token exchange (``model/moe.py`` Steps 2 and 5);
  * the world: ``all_gather_objects`` for the lockstep loop (``runtime/lockstep.py``).
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from deepinfer.artifacts.plan_schema import PlanError
from deepinfer.runtime.launcher import is_rank_process
from deepinfer.runtime.plan_loader import RuntimePlan

__all__ = ["EPExchange", "RankContext", "init_distributed"]

COLLECTIVE_TIMEOUT_S = 300
"""How long a rank waits for the others in one collective (rendezvous included)."""


@dataclass
class RankContext:
    """This rank's place in the plan's groups (``rank_groups.ranks[rank]``)."""

    rank: int
    world_size: int
    dp_rank: int
    dp_size: int
    ep_rank: int
    ep_size: int
    dp_group: Any  # torch.distributed ProcessGroup
    ep_exchange: EPExchange | None  # None for an EP group of one rank

    def allreduce_max(self, values: list[int]) -> list[int]:
        """Elementwise MAX of ``values`` over the DP group (the scheduler's vote)."""
        t = torch.tensor(values, dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.dp_group)
        return t.tolist()

    def all_gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order, over the world."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out


def init_distributed(plan: RuntimePlan,
                     timeout_s: float = COLLECTIVE_TIMEOUT_S) -> RankContext | None:
    """Join the world and build the groups; None for a one-rank plan.

    Raises PlanError naming the plan field when the process does not fit the plan (no rank
    environment for a multi-rank plan, another world size, a GPU plan, context parallelism).
    """
    groups = plan.plan["rank_groups"]
    world = int(groups["world_size"])
    env_world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        if env_world != 1:
            raise PlanError(plan.source, "rank_groups.world_size",
                            f"the plan has 1 rank but {env_world} processes were started "
                            "(WORLD_SIZE); run it as one process")
        return None
    if not is_rank_process():
        raise PlanError(plan.source, "rank_groups.world_size",
                        f"the plan has {world} ranks: run it with `deepinfer-run PLAN` (which "
                        f"starts them) or under `torchrun --nproc-per-node {world}`, with one "
                        "LLM per rank")
    if env_world != world:
        raise PlanError(plan.source, "rank_groups.world_size",
                        f"the plan has {world} ranks but WORLD_SIZE is {env_world}")
    if plan.device != "cpu":
        raise PlanError(plan.source, "topology.hardware.device",
                        "multi-rank replay runs on CPU over gloo only so far (NCCL is not "
                        "implemented)")
    if any(len(g) != 1 for g in groups["cp_groups"]):
        raise PlanError(plan.source, "topology.parallel.cp",
                        "context parallelism is not supported by the runtime yet (cp: 1)")
    rank = int(os.environ["RANK"])
    timeout = timedelta(seconds=timeout_s)
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
        # torn down before the interpreter's own teardown: a gloo group still alive then has
        # aborted a rank that had finished its work ("terminate called without an active
        # exception", seen once in CI on a loaded machine)
        atexit.register(_destroy_process_group)
    elif dist.get_world_size() != world or dist.get_rank() != rank:
        raise PlanError(plan.source, "rank_groups.world_size",
                        f"torch.distributed is already initialized as rank {dist.get_rank()} of "
                        f"{dist.get_world_size()}, not rank {rank} of {world}")
    me = groups["ranks"][rank]
    dp_group = _own_group(groups["dp_groups"], rank, timeout)
    ep_group = _own_group(groups["ep_groups"], rank, timeout)
    ep_ranks = next(g for g in groups["ep_groups"] if rank in g)
    dp_ranks = next(g for g in groups["dp_groups"] if rank in g)
    exchange = EPExchange(ep_group, ep_ranks.index(rank), len(ep_ranks)) \
        if len(ep_ranks) > 1 else None
    return RankContext(rank, world, dp_ranks.index(rank), len(dp_ranks), int(me["ep_rank"]),
                       len(ep_ranks), dp_group, exchange)


def _destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def _own_group(all_groups: list[list[int]], rank: int, timeout: timedelta) -> Any:
    """Create every group (each rank must call ``new_group`` for all, in the same order)."""
    own = None
    for ranks in all_groups:
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            own = group
    return own


class EPExchange:
    """The MoE token exchange of one EP group, on CPU over gloo.

    ``gather``: all-gather of every rank's tokens (hidden states + routing), rank-major;
    ``reduce``: all-reduce (sum) of the per-(token, pick) expert outputs, of which each rank
    keeps its own rows. Simple and exact, but every rank sees every token of the group. The GPU
    path to come replaces both with all-to-alls (DeepEP style): dispatch only the (token, pick)
    pairs routed to another rank's slots, combine their outputs back to the token's rank; the
    combine keeps the per-pick rows so that ``combine_in_expert_order`` still applies.

    Collectives per call: ``gather`` two all-gathers (counts, then the packed rows) unless the
    group has no tokens at all; ``reduce`` one all-reduce. Every rank of the group sees the same
    counts, so all of them skip or run the same collectives.
    """

    def __init__(self, group: Any, rank_in_group: int, size: int):
        self.group, self.rank_in_group, self.size = group, rank_in_group, size

    def gather(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, slice]:
        """(n, D) x.dtype, (n, K) int64, (n, K) fp32 -> the group's (N_g, D), (N_g, K),
        (N_g, K), rank-major, and this rank's rows ``slice(start, start + n)`` in them."""
        n, dim = x.shape
        top_k = ids.shape[1]
        counts_t = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
        dist.all_gather(counts_t, torch.tensor([n], dtype=torch.int64), group=self.group)
        counts = [int(c) for c in counts_t]
        start = sum(counts[:self.rank_in_group])
        mine = slice(start, start + n)
        if sum(counts) == 0:
            return x, ids, weights, mine
        parts = (x.contiguous(), ids.to(torch.int64).contiguous(),
                 weights.to(torch.float32).contiguous())
        widths = [p.element_size() * p.shape[1] for p in parts]  # bytes per row
        packed = torch.cat([p.view(torch.uint8).reshape(n, w)
                            for p, w in zip(parts, widths, strict=True)], dim=1)
        rows = max(counts)
        padded = torch.zeros(rows, sum(widths), dtype=torch.uint8)
        padded[:n] = packed
        bufs = [torch.empty_like(padded) for _ in range(self.size)]
        dist.all_gather(bufs, padded, group=self.group)
        table = torch.cat([b[:c] for b, c in zip(bufs, counts, strict=True)])
        x_all, ids_all, w_all = (
            table[:, lo:lo + w].contiguous().view(p.dtype)
            for p, lo, w in zip(parts, _offsets(widths), widths, strict=True))
        assert x_all.shape == (sum(counts), dim) and ids_all.shape[1] == top_k
        return x_all, ids_all, w_all, mine

    def reduce(self, y: torch.Tensor) -> None:
        """Sum ``y`` (N_g, K, D) fp32 over the group, in place."""
        dist.all_reduce(y, group=self.group)


def _offsets(widths: list[int]) -> list[int]:
    out, acc = [], 0
    for w in widths:
        out.append(acc)
        acc += w
    return out
