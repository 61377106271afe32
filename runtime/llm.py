"""``LLM``: the Python API over a compiled plan.

    from deepinfer.runtime import LLM, SamplingParams
    llm = LLM("plan/")
    outs = llm.generate(["Hello", [1, 2, 3]], SamplingParams(max_tokens=32))

``generate`` validates every prompt first (``api.normalize_prompts``: the same rules as the JSONL
input), copies the sampling parameters per request, runs the engine until every request has
finished, and returns copies of the outputs in prompt order — never objects the engine reuses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.api import PromptInput, normalize_prompts
from deepinfer.runtime.engine import Engine
from deepinfer.runtime.model_loader import load_model
from deepinfer.runtime.outputs import RequestOutput
from deepinfer.runtime.plan_loader import RuntimePlan, load_runtime_plan
from deepinfer.runtime.request_io import Request
from deepinfer.runtime.sampling_params import SamplingParams

__all__ = ["LLM"]


class LLM:
    """A loaded plan: model with weights in their planned places, cache allocated as planned.

    Args:
        plan_dir: a directory written by ``deepinfer-compile`` (verified before anything loads).
        pipeline: the zero-overhead pipeline (post-processing overlapped with the next step).
        seed: engine seed (requests without a seed use ``seed + prompt index``); also the seed
            of synthetic weights when the plan says ``weights: synthetic``.
    """

    def __init__(self, plan_dir: str | Path, *, pipeline: bool = True, seed: int = 0):
        self.plan: RuntimePlan = load_runtime_plan(plan_dir)
        kernels = KernelSet(self.plan.kernels)
        self.loaded = load_model(self.plan.model_path, self.plan.weights, seed=0, kernels=kernels)
        self.engine = Engine(self.plan, self.loaded, pipeline=pipeline, seed=seed)

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    def generate(self, prompts: PromptInput | Sequence[PromptInput],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None, *,
                 base_dir: Path = Path()) -> list[RequestOutput]:
        """Run prompts (text, token-id lists or multimodal dicts) to completion."""
        requests = normalize_prompts(prompts, sampling_params, self.tokenizer, self.max_model_len,
                                     vocab_size=self.loaded.spec.vocab_size,
                                     image_token_id=self.loaded.spec.image_token_id,
                                     base_dir=base_dir)
        outputs: dict[str, RequestOutput] = {}
        self.run(requests, lambda out: outputs.__setitem__(out.request_id, out))
        return [outputs[r.request_id].copy() for r in requests]

    def run(self, requests: Sequence[Request], on_finished: Callable[[RequestOutput], None],
            on_rejected: Callable[[Request, str], None] | None = None) -> None:
        """Queue ``requests`` and step until all finished; ``on_finished`` gets each output as
        soon as its request finishes (a copy). A request the engine cannot run (e.g. longer than
        the cache can ever hold) goes to ``on_rejected`` with the reason, or raises ValueError
        when no ``on_rejected`` is given."""
        for r in requests:
            try:
                self.engine.add(r)
            except ValueError as err:
                if on_rejected is None:
                    raise ValueError(f"request {r.request_id}: {err}") from None
                on_rejected(r, str(err))
        while self.engine.has_work():
            for out in self.engine.step():
                on_finished(out)
