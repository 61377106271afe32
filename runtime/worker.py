"""The worker: enqueues one step's forward and sampling; the host copy of its tokens comes later.

A step runs in two parts:

* ``launch(inputs)`` enqueues the forward and the sampling (and the requested logprobs) on the
  device and keeps the results there. A CUDA-graph decode step is enqueued right away on the
  calling thread — a replay and a few sampling kernels, no host sync — so the engine can launch
  step t+1 while step t still runs, its token ids fed on the device from step t's samples
  (``StepInputs.feed``). Any other step (prefill, eager decode) runs on a background thread
  when pipelining, since its Python forward is slow to launch; it may be launched while
  earlier steps are in flight (the thread enqueues them in order), and a step launched inline
  behind it first waits until the thread has enqueued it (``wait_enqueued``): the stream sees
  the steps' kernels in launch order.
* ``collect()`` returns the oldest launched step's result: its device -> host copies (the
  sampled token ids, plus the requested logprobs) were queued at launch, right behind the
  step's sampling, into pinned memory with an event; collecting waits for that event — for
  that step only, not for the steps launched after it.

The inputs of a launched step are held in a deferred-release pool until it is collected, so
nothing the in-flight work may still read is freed or reused underneath it.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.decode_graphs import DecodeGraphs
from deepinfer.runtime.device import to_device
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41
from deepinfer.runtime.outputs import TokenLogprobs

__all__ = ["DeferredReleasePool", "DeviceResult", "StepInputs", "StepResult", "Worker"]


@dataclass
class DeviceResult:
    """A launched step's results, still on the device."""

    tokens: torch.Tensor  # (sampling rows,) int64; -1 where the row's logits held NaN
    logprobs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # rows asking for them
    launch_s: float = 0.0
    host: list[torch.Tensor] | None = None  # pinned copies of tokens (+ logprobs), in flight
    ready: torch.cuda.Event | None = None  # recorded after those copies

    def copy_to_host(self) -> DeviceResult:
        """On CUDA, queue the device -> host copies of the results right behind the step's
        sampling and record an event: :meth:`host_results` then waits for this step only. (A
        synchronous ``tolist()`` at collect time would queue behind everything launched since —
        the next step's graph — and serialize the pipeline.)"""
        if self.tokens.device.type != "cuda":
            return self
        tensors = [self.tokens, *(self.logprobs or ())]
        self.host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
        for h, t in zip(self.host, tensors, strict=True):
            h.copy_(t, non_blocking=True)
        self.ready = torch.cuda.Event()
        self.ready.record()
        return self

    def host_results(self) -> tuple[list[int], tuple[torch.Tensor, ...] | None]:
        """Token ids and the logprob tensors on the host (waits for this step's copies)."""
        if self.ready is None:
            return self.tokens.tolist(), self.logprobs
        self.ready.synchronize()
        tokens, *logprobs = self.host
        return tokens.tolist(), (tuple(logprobs) if logprobs else None)


@dataclass
class StepResult:
    token_ids: list[int]  # one per sampling row
    logprobs: list[TokenLogprobs | None]  # one per sampling row
    forward_s: float = 0.0


@dataclass
class StepInputs:
    """One scheduled step, copied out of the scheduler's buffers (rows = scheduled sequences).

    ``sample_rows`` are the rows that sample a token; the sampling arrays (temperature … positions)
    have one entry per sampling row, filled by the C++ sample preparation.
    """

    step_id: int
    is_prefill: bool
    batch: ForwardBatch | None  # None: a CUDA-graph decode step (``graph_rows``)
    seq_ids: np.ndarray  # (rows,) int64
    epochs: np.ndarray  # (rows,) int64
    samples: np.ndarray  # (rows,) bool
    sample_rows: np.ndarray  # (sampling rows,) int64 indices into rows
    sample_rows_device: torch.Tensor  # the same on the model's device
    temperature: torch.Tensor  # (sampling rows,) each, on the model's device
    top_p: torch.Tensor
    top_k: torch.Tensor
    min_p: torch.Tensor
    seeds: torch.Tensor
    positions: torch.Tensor
    num_top_logprobs: list[int]  # per sampling row, -1 = no logprobs
    all_greedy: bool = False  # every sampling row has temperature 0 (``greedy_tokens``)
    bucket: int = -1
    num_padded_rows: int = 0
    # a decode step replayed by DecodeGraphs: (n,) ids, positions, slots, (n, blocks) tables
    graph_rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    # per row: the sampling row of the step in flight whose token is this row's input (-1: the
    # id in graph_rows), and that step (set by the engine for a graph step launched behind it)
    feed: np.ndarray | None = None
    feed_from: StepInputs | None = None
    device: DeviceResult | None = None  # set by Worker.launch (inline) or its thread
    result: StepResult | None = field(default=None)


class DeferredReleasePool:
    """Keeps objects alive until the step that may still touch them has completed."""

    def __init__(self) -> None:
        self._held: dict[int, object] = {}

    def hold(self, step_id: int, obj: object) -> None:
        self._held[step_id] = obj

    def release(self, step_id: int) -> None:
        self._held.pop(step_id, None)

    def __len__(self) -> int:
        return len(self._held)


class Worker:
    """Forward + sampling of launched steps, collected oldest first."""

    def __init__(self, model: DeepseekV41, kernels: KernelSet, *, pipeline: bool = True,
                 graphs: DecodeGraphs | None = None):
        self.model, self.kernels, self.pipeline, self.graphs = model, kernels, pipeline, graphs
        self.deferred = DeferredReleasePool()
        device = model.device
        # The forward thread's current CUDA device is the model's (a rank's GPU), as the
        # caller's is: kernels launch on the current device's stream.
        init = (lambda: torch.cuda.set_device(device)) if device.type == "cuda" else None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="deepinfer-worker",
                                            initializer=init) if pipeline else None
        self._launched: deque[tuple[StepInputs, Future[DeviceResult] | None]] = deque()

    def launch(self, inputs: StepInputs) -> None:
        """Enqueue ``inputs``: inline for a graph step, else on the thread (or inline without
        pipelining), behind every step launched before it. A step fed from another must be
        launched after it, inline. An eager step with nothing in flight also runs inline: the
        GPU is idle, and the thread would start it only once the caller's Python blocks and
        releases the GIL (~0.28 ms on the H100 host: a lone prompt's first kernel that much
        later, session 40); the caller's own work after the launch then overlaps the GPU."""
        inline = (inputs.graph_rows is not None or self._executor is None
                  or not self._launched)
        if inline:
            self.wait_enqueued()
        if inputs.feed_from is not None and inputs.feed_from.device is None:
            raise RuntimeError("a fed step needs its source step enqueued first")
        self.deferred.hold(inputs.step_id, inputs)
        future = None
        if inline:
            self._enqueue(inputs)
        else:
            future = self._executor.submit(self._enqueue, inputs)
        self._launched.append((inputs, future))

    def wait_enqueued(self) -> None:
        """Wait until the thread has enqueued every step launched so far (their kernels are
        on the stream; the GPU may still run them). Whatever the caller enqueues next runs
        after them. Re-raises a forward's error."""
        for _, future in self._launched:
            if future is not None:
                future.result()

    def collect(self) -> StepResult:
        """The oldest launched step's result (waits for that step)."""
        if not self._launched:
            raise RuntimeError("no step in flight")
        inputs, future = self._launched.popleft()
        dev = future.result() if future is not None else inputs.device
        token_ids, logprob_parts = dev.host_results()  # waits for this step only
        self.deferred.release(inputs.step_id)
        bad = [j for j, t in enumerate(token_ids) if t < 0]
        if bad:
            raise ValueError(f"step {inputs.step_id}: logits contain NaN in sampling rows {bad}")
        logprobs = _host_logprobs(logprob_parts, inputs.num_top_logprobs, token_ids)
        return StepResult(token_ids, logprobs, dev.launch_s)

    def _enqueue(self, inputs: StepInputs) -> DeviceResult:
        t0 = time.perf_counter()
        if inputs.graph_rows is not None:
            feed_tokens = None if inputs.feed_from is None else inputs.feed_from.device.tokens
            inputs.feed_from = None  # no chain of steps kept alive
            logits = self.graphs.run(*inputs.graph_rows, feed=inputs.feed,
                                     feed_tokens=feed_tokens)  # (rows, vocab) fp32
        else:
            logits = self.model(inputs.batch, all_logits=False)  # (rows, vocab) fp32
        if len(inputs.sample_rows) == 0:
            tokens = torch.zeros(0, dtype=torch.int64, device=logits.device)
            inputs.device = DeviceResult(tokens, None, time.perf_counter() - t0).copy_to_host()
            return inputs.device
        picked = logits if len(inputs.sample_rows) == logits.shape[0] else \
            logits[inputs.sample_rows_device]  # sample_rows ascending: equal length = all rows
        if inputs.all_greedy:  # known on the host: no sort, softmax or noise over the vocab
            tokens = self.kernels.greedy_tokens(picked)
        else:
            tokens = self.kernels.sample_tokens(picked, inputs.temperature, inputs.top_p,
                                                inputs.top_k, inputs.min_p, inputs.seeds,
                                                inputs.positions)
        # logprobs now: a graph's logits are overwritten by the next replay
        parts = _device_logprobs(self.kernels, picked, tokens, inputs.num_top_logprobs)
        inputs.device = DeviceResult(tokens, parts, time.perf_counter() - t0).copy_to_host()
        return inputs.device

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


def _device_logprobs(kernels: KernelSet, logits: torch.Tensor, tokens: torch.Tensor,
                     num_top: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The ``token_logprobs`` op over the rows asking for logprobs (None if none does)."""
    wanted = [i for i, k in enumerate(num_top) if k >= 0]
    if not wanted:
        return None
    idx = to_device(np.array(wanted, dtype=np.int64), logits.device)
    return kernels.token_logprobs(logits[idx], tokens[idx], max(num_top[i] for i in wanted))


def _host_logprobs(parts: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
                   num_top: list[int], token_ids: list[int]) -> list[TokenLogprobs | None]:
    """Per sampling row: its logprobs (None where the row did not ask), copied to the host."""
    out: list[TokenLogprobs | None] = [None] * len(num_top)
    if parts is None:
        return out
    sampled, top_ids, top_lp = (t.tolist() for t in parts)
    for j, i in enumerate(i for i, k in enumerate(num_top) if k >= 0):
        k = num_top[i]
        top = list(zip(top_ids[j][:k], top_lp[j][:k], strict=True))
        out[i] = TokenLogprobs(int(token_ids[i]), float(sampled[j]), top)
    return out
