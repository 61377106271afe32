"""The multi-rank engine loop: every rank steps in lockstep until no rank has work left.

The DP vote (inside ``Scheduler.schedule``) and the EP exchange (inside every MoE layer) are
collectives, so every rank must step the same number of times — also a rank whose requests are
all done, or that never had any: its scheduler votes with nothing to do and its engine runs an
idle forward that joins the EP exchanges with no tokens (``Engine.step``).

One iteration = one all-gather over the world of ``(outputs finished by this rank's last step,
its rejected requests, whether it still has work)``, then — unless no rank has work — one
``engine.step()`` on every rank. The same all-gather hands every rank's finished outputs to
rank 0 when ``to_rank0`` is set (``deepinfer-run``: rank 0 writes the single results file, so
results reach it one step after they finish and are written, fsynced, as they arrive).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from deepinfer.runtime.distributed import RankContext
from deepinfer.runtime.engine import Engine
from deepinfer.runtime.outputs import RequestOutput
from deepinfer.runtime.request_io import Request

__all__ = ["run_lockstep"]


def run_lockstep(engine: Engine, ctx: RankContext, requests: Sequence[Request],
                 on_finished: Callable[[RequestOutput], None],
                 on_rejected: Callable[[Request, str], None] | None, *,
                 to_rank0: bool = False) -> None:
    """Queue this rank's ``requests`` and step with every other rank until all are done.

    Callbacks get this rank's outputs and rejections, or with ``to_rank0`` every rank's on
    rank 0 and none elsewhere. Without ``on_rejected`` a rejected request raises ValueError on
    every rank (after the first all-gather, so that no rank is left waiting in a collective).
    """
    rejected: list[tuple[Request, str]] = []
    for r in requests:
        try:
            engine.add(r)
        except ValueError as err:
            rejected.append((r, str(err)))
    finished: list[RequestOutput] = []
    first = True
    while True:
        everyone = ctx.all_gather_objects((finished, rejected, engine.has_work()))
        if first and on_rejected is None:
            _raise_if_rejected(everyone, ctx.rank)
        first = False
        for rank, (outs, rejs, _) in enumerate(everyone):
            if (to_rank0 and ctx.rank != 0) or (not to_rank0 and rank != ctx.rank):
                continue
            for req, reason in rejs:
                assert on_rejected is not None
                on_rejected(req, reason)
            for out in outs:
                on_finished(out)
        if not any(has_work for _, _, has_work in everyone):
            return
        finished, rejected = engine.step(), []


def _raise_if_rejected(everyone: list, rank: int) -> None:
    for req, reason in everyone[rank][1]:
        raise ValueError(f"request {req.request_id}: {reason}")
    for other, (_, rejs, _) in enumerate(everyone):
        if rejs:
            raise ValueError(f"rank {other} rejected request {rejs[0][0].request_id}: "
                             f"{rejs[0][1]}")
