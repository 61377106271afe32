"""Sampler: per-row sampling parameters -> tensors -> the ``sample_tokens`` kernel op.

One row per sequence that samples this step. Everything random about a row comes from its
``seed`` and ``position`` (the index of the output token being sampled), so a request draws the
same tokens alone or in any batch (see ``kernels/reference/sampling.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.outputs import TokenLogprobs
from deepinfer.runtime.sampling_params import SamplingParams


@dataclass(frozen=True, slots=True)
class SamplingRow:
    """What the sampler needs about one row.

    Attributes:
        params: the request's sampling parameters.
        seed: the resolved seed (``params.resolved_seed(engine_seed, request_index)``).
        position: output position of the token being sampled (0 for the first output token).
    """

    params: SamplingParams
    seed: int
    position: int


@dataclass(frozen=True, slots=True)
class SamplingTensors:
    """The per-row arrays of the ``sample_tokens`` op, each (rows,)."""

    temperature: torch.Tensor  # float32, 0 = greedy
    top_p: torch.Tensor  # float32
    top_k: torch.Tensor  # int64, <= 0 = off
    min_p: torch.Tensor  # float32
    seeds: torch.Tensor  # int64
    positions: torch.Tensor  # int64

    @classmethod
    def from_rows(cls, rows: list[SamplingRow], device: torch.device | str = "cpu"
                  ) -> SamplingTensors:
        def column(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype, device=device)

        return cls(
            temperature=column([r.params.temperature for r in rows], torch.float32),
            top_p=column([r.params.top_p for r in rows], torch.float32),
            top_k=column([r.params.top_k for r in rows], torch.int64),
            min_p=column([r.params.min_p for r in rows], torch.float32),
            seeds=column([r.seed for r in rows], torch.int64),
            positions=column([r.position for r in rows], torch.int64),
        )


@dataclass(frozen=True, slots=True)
class SamplerOutput:
    token_ids: list[int]  # one per row
    logprobs: list[TokenLogprobs | None]  # one per row; None where the row did not ask


class Sampler:
    """Samples one token per row with the kernel backend the plan chose (reference by default)."""

    def __init__(self, kernels: KernelSet | None = None) -> None:
        self.kernels = kernels or KernelSet()

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> SamplerOutput:
        """Sample.

        Args:
            logits: (len(rows), vocab) float32 raw logits, row i for ``rows[i]``.
            rows: per-row parameters.
        """
        if logits.shape[0] != len(rows):
            raise ValueError(f"{logits.shape[0]} logit rows for {len(rows)} sampling rows")
        t = SamplingTensors.from_rows(rows, logits.device)
        token_ids = self.kernels.sample_tokens(logits, t.temperature, t.top_p, t.top_k, t.min_p,
                                               t.seeds, t.positions)
        return SamplerOutput(token_ids.tolist(), self._logprobs(logits, token_ids, rows))

    def _logprobs(self, logits: torch.Tensor, token_ids: torch.Tensor,
                  rows: list[SamplingRow]) -> list[TokenLogprobs | None]:
        wanted = [i for i, r in enumerate(rows) if r.params.logprobs is not None]
        out: list[TokenLogprobs | None] = [None] * len(rows)
        if not wanted:
            return out
        num_top = max(rows[i].params.logprobs or 0 for i in wanted)
        index = torch.tensor(wanted, dtype=torch.int64, device=logits.device)
        sampled, top_ids, top_lp = self.kernels.token_logprobs(logits[index], token_ids[index],
                                                               num_top)
        for j, i in enumerate(wanted):
            n = rows[i].params.logprobs or 0
            top = list(zip(top_ids[j, :n].tolist(), top_lp[j, :n].tolist(), strict=True))
            out[i] = TokenLogprobs(int(token_ids[i]), float(sampled[j]), top)
        return out
