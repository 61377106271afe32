"""The engine: replays a plan over a batch of requests, one scheduler step at a time.

Per step (architecture.md §5, seed §4.1)::

    schedule t (C++) ─► inputs t ─► launch t ─► collect t-1 ─► post-process t-1
                                    (device)    (waits for t-1 only: t is queued behind it)

Post-processing (token commit, stop checks, detokenization, output update, scheduler commit)
of step t-1 runs while step t is in flight; that is the zero-overhead pipeline, on by default
(``pipeline=False`` runs each step to the end before the next, with identical results). Step t
is launched before step t-1's tokens reach the host: a CUDA-graph decode step takes the tokens
t-1 is sampling on the device (``StepInputs.feed``), so the device always has the next step
queued and the host's work per step (scheduling, inputs, post-processing) hides behind it —
also behind an eager step t-1 (a prefill chunk), once the worker thread has enqueued it. An
eager step t (a prefill chunk, an eager decode) is launched behind t-1 when all its input
tokens are known on the host — a prompt's chunks are: the next chunk's host work and launches
overlap t-1's kernels —, else it collects t-1 first. On one rank it then stays in flight like
a graph step; with a DP vote or EP exchanges it is collected within its own ``step()`` (its
forward, on the worker thread, still overlaps the post-processing of t-1), so that no
collective of a schedule interleaves with a forward's.

Because the scheduler plans step t before it learns what t-1 produced, a sequence that stops
at t-1 may still have a row in step t: its result is dropped, as is any row whose sequence was
reset (preempted for recompute) since it was scheduled — the scheduler's epochs tell them
apart. Blocks freed by a commit may be handed out while a step is still in flight: its stale
rows write them before the new owner's (one stream orders them), and a sequence only reads
what it wrote itself. The inputs of an in-flight step are held by a deferred-release pool until
it is collected.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from deepinfer import _C
from deepinfer.runtime.cache_pool import CachePool
from deepinfer.runtime.decode_graphs import DecodeGraphs, graph_blocking_ops
from deepinfer.runtime.detokenizer import RequestDetokenizer
from deepinfer.runtime.device import plan_device, sampling_columns, to_device
from deepinfer.runtime.engine_stats import EngineStats
from deepinfer.runtime.kernel_backends import PlannedKernels
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model_loader import LoadedModel
from deepinfer.runtime.outputs import RequestOutput
from deepinfer.runtime.plan_loader import RuntimePlan
from deepinfer.runtime.request_io import Request, load_image_embeds
from deepinfer.runtime.worker import StepInputs, StepResult, Worker

__all__ = ["Engine"]

@dataclass
class LiveRequest:
    """Host state of one request between ``add`` and its finish."""

    seq_id: int
    request: Request
    output: RequestOutput
    detok: RequestDetokenizer
    seed: int
    image_mask: list[bool] | None = None  # per prompt position
    image_embeds: torch.Tensor | None = None  # (image tokens, D) in prompt order
    image_rows_before: list[int] | None = None  # image tokens before each prompt position
    epoch: int = -1  # the scheduler epoch the host state below belongs to
    inflight: list[int] = field(default_factory=list)  # sampled, not yet post-processed

    @property
    def num_known_tokens(self) -> int:
        """Tokens the host knows: prompt, committed outputs, sampled but not committed."""
        return len(self.request.prompt_token_ids) + len(self.output.token_ids) + \
            len(self.inflight)

    def num_known_tokens_at(self, epoch: int) -> int:
        """:attr:`num_known_tokens` for a step scheduled at ``epoch``: the in-flight samples
        of an older epoch are void (the step's inputs reset them)."""
        if self.epoch == epoch:
            return self.num_known_tokens
        return len(self.request.prompt_token_ids) + len(self.output.token_ids)

    def tokens_at(self, start: int, n: int) -> list[int]:
        """Token ids of positions [start, start + n): prompt, then committed, then in-flight."""
        prompt = self.request.prompt_token_ids
        seq = list(prompt[start:start + n])
        if len(seq) < n:
            rest = self.output.token_ids + self.inflight
            lo = max(0, start - len(prompt))
            seq += rest[lo:lo + n - len(seq)]
        if len(seq) != n:
            raise RuntimeError(f"request {self.request.request_id}: positions {start}..{start + n}"
                               f" scheduled but only {len(prompt) + len(self.output.token_ids)}"
                               f" + {len(self.inflight)} tokens exist")
        return seq


class Engine:
    """One rank's engine over a verified plan and a loaded model.

    Args:
        plan: the verified plan; loaded: spec, tokenizer and model with weights in place.
        pipeline: overlap post-processing of step t-1 with step t (zero-overhead pipeline).
        seed: engine seed; a request without its own seed uses ``seed + request.index``.
        cuda_graphs: on a CUDA device, capture the plan's decode buckets at start and replay
            them for decode steps (``runtime/decode_graphs.py``); ignored on CPU.
        log: start-up progress lines (one per captured bucket), or None.
        allreduce_max: elementwise MAX over the DP ranks for the scheduler's vote (None = one
            rank).
    """

    def __init__(self, plan: RuntimePlan, loaded: LoadedModel, *, pipeline: bool = True,
                 seed: int = 0, cuda_graphs: bool = True,
                 allreduce_max: Callable[[list[int]], list[int]] | None = None,
                 log: Callable[[str], None] | None = None):
        self.plan, self.spec, self.tokenizer = plan, loaded.spec, loaded.tokenizer
        self.model = loaded.model
        self.kernels = loaded.model.kernels
        self.device = plan_device(plan.device)
        if self.model.device != self.device:
            raise ValueError(f"the model is on {self.model.device} but the plan runs on "
                             f"{self.device}; load it with LLM (or model.to_device)")
        self.seed, self.allreduce_max = seed, allreduce_max
        # eager steps (prefill, eager decode) stay in flight across the next schedule where
        # no collective can interleave with their forward: one rank, no DP vote (False: each
        # is collected within its own step, as a multi-rank engine does; bench/prefill.py's
        # A/B)
        self.eager_in_flight = allreduce_max is None and not self.model.has_ep_exchange
        s = plan.scheduler
        self.max_model_len = int(s["max_model_len_tokens"])
        self.pool = CachePool(self.spec, s["num_blocks"], s["num_state_slots"],
                              s["block_size_tokens"], device=self.device)
        self.scheduler = _C.Scheduler(_C.SchedulerConfig(
            block_size=s["block_size_tokens"], num_blocks=s["num_blocks"],
            num_state_slots=s["num_state_slots"], max_model_len=self.max_model_len,
            max_num_seqs=s["max_num_seqs"], max_num_batched_tokens=s["max_num_batched_tokens"],
            prefill_chunk_size=s["prefill_chunk_size_tokens"],
            mode=getattr(_C.SchedulerMode, s["mode"].upper()),
            prefill_watermark=s["prefill_watermark"],
            vote_interval_steps=s["vote_interval_steps"], lookahead_tokens=s["lookahead_tokens"],
            decode_buckets=plan.decode_buckets,
            prefill_token_buckets=plan.prefill_token_buckets))
        self.graphs: DecodeGraphs | None = None
        want_graphs = cuda_graphs and self.device.type == "cuda" \
            and not self.model.has_ep_exchange
        syncing = graph_blocking_ops(self.kernels) if want_graphs else []
        if syncing:
            (log or warnings.warn)(f"decode runs eagerly (no CUDA graphs): the plan runs the "
                                   f"reference {', '.join(syncing)}, which reads device values "
                                   "on the host")
        elif want_graphs:
            self.graphs = DecodeGraphs(self.model, self.pool, plan.decode_buckets,
                                       self.max_model_len, log=log)
            self.graphs.capture()
        self.worker = Worker(self.model, self.kernels, pipeline=pipeline, graphs=self.graphs)
        self.live: dict[int, LiveRequest] = {}
        fallback_calls = self.kernels.fallback_calls \
            if isinstance(self.kernels, PlannedKernels) else {}
        self.stats = EngineStats(kernel_fallback_calls=fallback_calls)
        self._next_seq_id = 0
        self._launched: StepInputs | None = None  # launched, not yet post-processed
        self._wait_s = 0.0  # this step's time waiting for results (excluded from host time)

    # ---- requests ----------------------------------------------------------------------------
    def add(self, request: Request) -> int:
        """Queue a validated request; returns its sequence id. ValueError if it cannot run."""
        p = request.params
        detok = RequestDetokenizer(self.tokenizer, p, self.spec.eos_token_id,
                                   num_prompt_tokens=len(request.prompt_token_ids),
                                   max_model_len=self.max_model_len)
        seed = p.resolved_seed(self.seed, request.index)
        live = LiveRequest(self._next_seq_id, request,
                           RequestOutput(request.request_id, list(request.prompt_token_ids),
                                         logprobs=[] if p.logprobs is not None else None),
                           detok, seed)
        if request.images:
            self._attach_images(live)
        spans = [(img.begin, img.end) for img in request.images]
        self.scheduler.add_request(live.seq_id, len(request.prompt_token_ids),
                                   detok.max_output_tokens, spans, False,
                                   temperature=p.temperature, top_p=p.top_p, top_k=max(p.top_k, 0),
                                   min_p=p.min_p, seed=seed)
        self._next_seq_id += 1
        self.live[live.seq_id] = live
        return live.seq_id

    def _attach_images(self, live: LiveRequest) -> None:
        n = len(live.request.prompt_token_ids)
        mask = [False] * n
        embeds = []
        for img in live.request.images:
            mask[img.begin:img.end] = [True] * img.num_tokens
            embeds.append(load_image_embeds(img, self.spec.hidden_size))
        before, acc = [], 0
        for m in mask:
            before.append(acc)
            acc += m
        before.append(acc)
        live.image_mask, live.image_embeds, live.image_rows_before = mask, torch.cat(embeds), before

    def has_work(self) -> bool:
        return bool(self.live) or self._launched is not None

    # ---- the step ----------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Schedule and launch step t, collect and post-process step t-1; returns requests
        finished by t-1 (and by t itself without pipelining)."""
        t0 = time.perf_counter()
        self._wait_s = 0.0
        plan = self.scheduler.schedule(self.allreduce_max)
        for seq_id in plan.preempted:  # reset for recompute: in-flight tokens are void
            live = self.live.get(seq_id)
            if live is not None:
                live.epoch, live.inflight = -1, []
        prev, inputs = self._launched, None
        if prev is not None and prev.result is None:
            # what this step enqueues (copies, inputs, its forward) goes behind prev's kernels
            t1 = time.perf_counter()
            self.worker.wait_enqueued()
            self._wait_s += time.perf_counter() - t1
        for src, dst in np.array(plan.block_copies).reshape(-1, 2):  # forks: partial last blocks
            self.pool.copy_block(int(src), int(dst))
        for src, dst in np.array(plan.slot_copies).reshape(-1, 2):
            self.pool.copy_slot(int(src), int(dst))
        if plan.num_rows:
            graph = self._is_graph_step(plan)
            if prev is not None and prev.result is None and self._needs_prev_tokens(plan, graph,
                                                                                     prev):
                self._collect(prev)  # this step's inputs need prev's tokens on the host
            feed_from = prev if prev is not None and prev.result is None else None
            inputs = self._inputs(plan, graph, feed_from)
        if inputs is not None:
            self.worker.launch(inputs)
        elif self.model.has_ep_exchange:  # multi-rank: the EP group's exchanges need this rank
            self.model.forward_idle()     # too, with no tokens (runtime/lockstep.py)
        finished: list[RequestOutput] = []
        if prev is not None:
            if prev.result is None:
                self._collect(prev)  # waits for prev only; step t is queued behind it
            finished = self._post_process(prev)
        t2, waited_s = time.perf_counter(), self._wait_s  # waits after t2 are not in t2 - t0
        self._launched = inputs
        if inputs is not None and not (self.worker.pipeline and (inputs.graph_rows is not None
                                                                 or self.eager_in_flight)):
            # An eager step of a multi-rank engine ends within its own step() (its forward on
            # the worker thread overlapped the post-processing above): never in flight across
            # a schedule, whose DP vote must not interleave with a forward's EP exchanges.
            self._collect(inputs)
            if not self.worker.pipeline:
                finished += self._post_process(inputs)
                self._launched = None
        t3 = time.perf_counter()
        self.stats.step(plan, inputs, host_s=(t2 - t0) - waited_s, step_s=t3 - t0,
                        usage=self.scheduler.usage())
        return finished

    def _needs_prev_tokens(self, plan, graph: bool, prev: StepInputs) -> bool:
        """Whether step ``plan``'s inputs need step ``prev`` (in flight) collected first: a
        graph step takes prev's tokens on the device once prev is enqueued; an eager step of
        a one-rank engine goes behind prev when every input token is known on the host (a
        prompt's chunks: the next prefill's host work and launches overlap prev's kernels)."""
        if graph:
            return prev.device is None
        if not self.eager_in_flight:
            return True
        n = plan.num_rows
        return any(start + count > self.live[int(seq_id)].num_known_tokens_at(int(epoch))
                   for seq_id, epoch, start, count in zip(plan.seq_ids[:n], plan.epochs[:n],
                                                          plan.start_pos[:n], plan.num_tokens[:n],
                                                          strict=True))

    def _collect(self, inputs: StepInputs) -> None:
        """Wait for ``inputs``' results (the wait is not host time) and record its tokens."""
        t0 = time.perf_counter()
        result = self.worker.collect()
        self._wait_s += time.perf_counter() - t0
        self.stats.forward_s += result.forward_s
        self._record(inputs, result)

    def _is_graph_step(self, plan) -> bool:
        """Whether step ``plan`` replays a CUDA graph: every row one token (no image token),
        at most the largest bucket's rows."""
        n = plan.num_rows
        if self.graphs is None or n > self.graphs.buckets[-1]:
            return False
        if any(c != 1 for c in plan.num_tokens[:n]):
            return False
        for seq_id, pos in zip(plan.seq_ids[:n], plan.start_pos[:n], strict=True):
            mask = self.live[int(seq_id)].image_mask
            if mask is not None and pos < len(mask) and mask[pos]:
                return False
        return True

    def _inputs(self, plan, graph: bool, feed_from: StepInputs | None) -> StepInputs:
        """Everything step ``plan`` needs, copied out of the scheduler's reusable buffers.

        Host -> device, once per step: the block tables (one (rows, max blocks) copy), the
        token ids + positions + last rows (one packed copy, ``ForwardBatch.build``), the
        sampling parameters and sampling rows (two packed columns); state slots stay host ints
        (they index the pools directly). A graph step (``graph``) instead hands the worker host
        arrays (ids, positions, slots, tables), which ``DecodeGraphs.run`` copies into the
        graphs' static buffers in one copy; a row whose input token step ``feed_from`` (still
        in flight) is sampling takes it on the device (``StepInputs.feed``).
        """
        n = plan.num_rows
        seq_ids, epochs = np.array(plan.seq_ids[:n]), np.array(plan.epochs[:n])
        start, count = np.array(plan.start_pos[:n]), np.array(plan.num_tokens[:n])
        samples = np.array(plan.samples[:n]).astype(bool)
        host_tables = np.array(plan.block_tables[:n], dtype=np.int64)
        slots = np.array(plan.state_slots[:n])
        meta = self.scheduler.prepare_sample(seq_ids, epochs, np.array(plan.is_prefill[:n]),
                                             count.astype(np.int32),
                                             (start + count).astype(np.int32))
        fed = _sampling_rows_of(feed_from)
        chunks, masks, embeds = [], [], []
        feed = np.full(n, -1, dtype=np.int64)
        want_logprobs = np.zeros(n, dtype=bool)
        for i in range(n):
            live = self.live[int(seq_ids[i])]
            if live.epoch != int(epochs[i]):  # first schedule, or reset for recompute
                live.epoch, live.inflight = int(epochs[i]), []
            s, c = int(start[i]), int(count[i])
            src = fed.get((int(seq_ids[i]), live.epoch))
            if graph and src is not None and s == live.num_known_tokens:
                chunks.append([0])
                feed[i] = src  # sampled by the step in flight: fed on the device
            else:
                chunks.append(live.tokens_at(s, c))
            masks.append(self._image_rows(live, s, c, embeds))
            want_logprobs[i] = live.request.params.logprobs is not None
        batch, graph_rows = None, None
        if graph:  # a decode step: replay its graph
            graph_rows = (np.array([c[0] for c in chunks], dtype=np.int64),
                          start.astype(np.int64), slots.astype(np.int64), host_tables)
            for slot in slots[start == 0]:  # a one-token prompt: fresh history (pool.view)
                self.pool.engram_history[int(slot)] = -1
        else:
            any_image = any(any(m) for m in masks)
            tables = to_device(host_tables, self.device)
            caches = [self.pool.view(tables[i], int(slots[i]), int(start[i]), host_tables[i])
                      for i in range(n)]
            batch = ForwardBatch.build(chunks, caches, masks if any_image else None,
                                       torch.cat(embeds) if embeds else None,
                                       device=self.device)
        rows = np.flatnonzero(samples)
        host_temperature = np.array(meta.temperature)[rows]
        (temperature, top_p, min_p), (top_k, seeds, positions, rows_dev) = sampling_columns(
            [host_temperature, np.array(meta.top_p)[rows],
             np.array(meta.min_p)[rows]],
            [np.array(meta.top_k)[rows], np.array(meta.seeds)[rows],
             np.array(meta.offsets)[rows], rows], self.device)
        any_fed = bool((feed >= 0).any())
        return StepInputs(
            step_id=plan.step_id, is_prefill=bool(plan.phase == _C.Phase.PREFILL), batch=batch,
            graph_rows=graph_rows, feed=feed if any_fed else None,
            feed_from=feed_from if any_fed else None,
            seq_ids=seq_ids, epochs=epochs, samples=samples, sample_rows=rows,
            sample_rows_device=rows_dev,
            temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, seeds=seeds,
            positions=positions,
            num_top_logprobs=[int(self.live[int(seq_ids[r])].request.params.logprobs)
                              if want_logprobs[r] else -1 for r in rows],
            bucket=plan.bucket, num_padded_rows=plan.num_padded_rows,
            all_greedy=bool((host_temperature <= 0).all()))

    def _image_rows(self, live: LiveRequest, start: int, n: int,
                    embeds: list[torch.Tensor]) -> list[bool]:
        if live.image_mask is None or start >= len(live.image_mask):
            return [False] * n
        end = min(start + n, len(live.image_mask))
        mask = live.image_mask[start:end] + [False] * (start + n - end)
        lo, hi = live.image_rows_before[start], live.image_rows_before[end]
        if hi > lo:
            embeds.append(live.image_embeds[lo:hi])
        return mask

    def _record(self, inputs: StepInputs, result: StepResult) -> None:
        """Make step t's sampled tokens available as inputs of step t+1 (before post-processing)."""
        inputs.result = result
        for j, r in enumerate(inputs.sample_rows):
            live = self.live.get(int(inputs.seq_ids[r]))
            if live is not None and live.epoch == int(inputs.epochs[r]):
                live.inflight.append(result.token_ids[j])

    def _post_process(self, inputs: StepInputs) -> list[RequestOutput]:
        """Commit step ``inputs``: tokens, stop checks, text; tell the scheduler; finish."""
        result = inputs.result
        n = len(inputs.seq_ids)
        accepted, stop = np.zeros(n, dtype=np.int32), np.zeros(n, dtype=np.uint8)
        done: list[RequestOutput] = []
        for j, r in enumerate(inputs.sample_rows):
            live = self.live.get(int(inputs.seq_ids[r]))
            if live is None or live.epoch != int(inputs.epochs[r]) or not live.inflight:
                continue  # finished or reset since it was scheduled: the scheduler drops it too
            token = live.inflight.pop(0)
            reason = live.detok.append(token)
            live.output.token_ids = list(live.detok.token_ids)
            if live.output.logprobs is not None:
                live.output.logprobs.append(result.logprobs[j])
            accepted[r] = 1
            if reason is not None:
                stop[r] = 1
                done.append(self._finish(live, reason))
        dropped = self.scheduler.commit(inputs.step_id, accepted, stop)
        if any(accepted[r] for r in dropped):
            raise RuntimeError(f"step {inputs.step_id}: the scheduler dropped rows "
                               f"{[int(r) for r in dropped if accepted[r]]} the host committed")
        for seq_id, reason in self.scheduler.take_finished():
            live = self.live.get(seq_id)
            if live is not None:
                done.append(self._finish(live, _finish_reason(reason)))
        return done

    def _finish(self, live: LiveRequest, reason: str) -> RequestOutput:
        del self.live[live.seq_id]
        out = live.output
        out.finish_reason = reason
        out.token_ids = list(live.detok.token_ids)
        out.text = live.detok.text
        self.stats.finished(out)
        return out.copy()

    def abort_all(self, error: str) -> list[RequestOutput]:
        """Finish every live request with reason ``error`` (an unrecoverable step failure)."""
        out = []
        for live in list(self.live.values()):
            self.scheduler.abort(live.seq_id)
            live.output.error = error
            out.append(self._finish(live, "error"))
        return out


def _sampling_rows_of(step: StepInputs | None) -> dict[tuple[int, int], int]:
    """(seq id, epoch) -> sampling row of ``step`` (empty for None)."""
    if step is None:
        return {}
    return {(int(step.seq_ids[r]), int(step.epochs[r])): j
            for j, r in enumerate(step.sample_rows)}


def _finish_reason(scheduler_reason: str) -> str:
    """The scheduler's finish event -> the output's finish reason."""
    return {"stop": "stop", "length": "length", "preempted": "preempted",
            "prompt_done": "length"}[scheduler_reason]

