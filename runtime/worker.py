"""The worker: runs one step's forward and sampling, in flight while the host post-processes.

``launch`` starts step t (on a background thread when pipelining: torch ops release the GIL,
so the host's post-processing of step t-1 overlaps the forward); ``collect`` waits for it. The
inputs of a launched step are held in a deferred-release pool until the step completes, so
nothing the in-flight work may still read (token tensors, block tables, cache views, sampling
arrays) is freed or reused underneath it.

On a CUDA plan the forward and sampling run on the device; the step's only device -> host copy
is the sampled token ids (one ``tolist``), plus the requested logprobs when a row asks.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.decode_graphs import DecodeGraphs
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41
from deepinfer.runtime.outputs import TokenLogprobs

__all__ = ["DeferredReleasePool", "StepInputs", "StepResult", "Worker", "token_logprobs_of"]


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
    bucket: int = -1
    num_padded_rows: int = 0
    # a decode step replayed by DecodeGraphs: (n,) ids, positions, slots, (n, blocks) tables
    graph_rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
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
    """Forward + sampling of one step at a time."""

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
        self._future: Future[StepResult] | None = None
        self._inputs: StepInputs | None = None

    def launch(self, inputs: StepInputs) -> None:
        if self._future is not None or self._inputs is not None:
            raise RuntimeError("a step is already in flight; collect() it first")
        self.deferred.hold(inputs.step_id, inputs)
        self._inputs = inputs
        if self._executor is not None:
            self._future = self._executor.submit(self._run, inputs)

    def collect(self) -> StepResult:
        inputs, self._inputs = self._inputs, None
        if inputs is None:
            raise RuntimeError("no step in flight")
        if self._future is not None:
            future, self._future = self._future, None
            result = future.result()
        else:
            result = self._run(inputs)
        self.deferred.release(inputs.step_id)
        return result

    def _run(self, inputs: StepInputs) -> StepResult:
        t0 = time.perf_counter()
        if inputs.graph_rows is not None:
            logits = self.graphs.run(*inputs.graph_rows)  # (rows, vocab) fp32
        else:
            logits = self.model(inputs.batch, all_logits=False)  # (rows, vocab) fp32
        if len(inputs.sample_rows) == 0:
            return StepResult([], [], time.perf_counter() - t0)
        picked = logits if len(inputs.sample_rows) == logits.shape[0] else \
            logits[inputs.sample_rows_device]  # sample_rows ascending: equal length = all rows
        tokens = self.kernels.sample_tokens(picked, inputs.temperature, inputs.top_p,
                                            inputs.top_k, inputs.min_p, inputs.seeds,
                                            inputs.positions)
        token_ids = tokens.tolist()  # the step's device -> host copy
        logprobs = token_logprobs_of(self.kernels, picked, tokens, inputs.num_top_logprobs,
                                     token_ids)
        return StepResult(token_ids, logprobs, time.perf_counter() - t0)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


def token_logprobs_of(kernels: KernelSet, logits: torch.Tensor, token_ids: torch.Tensor,
                      num_top: list[int], host_token_ids: list[int] | None = None
                      ) -> list[TokenLogprobs | None]:
    """Per-row logprobs of the sampled tokens (None where the row did not ask).

    Computed on the logits' device; the results come back to the host in one copy each.
    """
    wanted = [i for i, k in enumerate(num_top) if k >= 0]
    out: list[TokenLogprobs | None] = [None] * len(num_top)
    if not wanted:
        return out
    if host_token_ids is None:
        host_token_ids = token_ids.tolist()
    idx = torch.tensor(wanted, dtype=torch.int64).to(logits.device)
    sampled, top_ids, top_lp = kernels.token_logprobs(logits[idx], token_ids[idx],
                                                      max(num_top[i] for i in wanted))
    sampled, top_ids, top_lp = sampled.tolist(), top_ids.tolist(), top_lp.tolist()
    for j, i in enumerate(wanted):
        k = num_top[i]
        top = list(zip(top_ids[j][:k], top_lp[j][:k], strict=True))
        out[i] = TokenLogprobs(int(host_token_ids[i]), float(sampled[j]), top)
    return out
