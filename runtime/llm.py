"""``LLM``: the Python API over a compiled plan.

    from deepinfer.runtime import LLM, SamplingParams
    llm = LLM("plan/")
    outs = llm.generate(["Hello", [1, 2, 3]], SamplingParams(max_tokens=32))

``generate`` validates every prompt first (``api.normalize_prompts``: the same rules as the JSONL
input), copies the sampling parameters per request, runs the engine until every request has
finished, and returns copies of the outputs in prompt order — never objects the engine reuses.

A multi-rank plan (``rank_groups.world_size`` > 1) needs one ``LLM`` per rank, in processes
started as ranks (``torchrun --nproc-per-node N``, or ``deepinfer-run``, which starts them
itself); elsewhere the constructor raises PlanError naming ``rank_groups.world_size``. Each
rank loads only its weights (the plan's shard map), and ``generate`` / ``run`` are then
collective: every rank calls them — with its own prompts, possibly none — and gets its own
outputs (``runtime/lockstep.py``).

Device: the model, the cache pool and every per-step tensor live on the plan's device
(``RuntimePlan.device``; ``runtime/device.py``). The kernel backend per op is the plan's
``kernels.backend_by_op`` (``runtime/kernel_backends.py``: Triton registered when the plan names
it, refused with a PlanError naming that field when it cannot run here).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from deepinfer.runtime.api import PromptInput, normalize_prompts
from deepinfer.runtime.device import plan_device
from deepinfer.runtime.distributed import RankContext, init_distributed
from deepinfer.runtime.engine import Engine
from deepinfer.runtime.kernel_backends import planned_kernels
from deepinfer.runtime.kernel_cache import use_plan_kernel_cache
from deepinfer.runtime.lockstep import run_lockstep
from deepinfer.runtime.outputs import RequestOutput
from deepinfer.runtime.plan_loader import RuntimePlan, load_runtime_plan
from deepinfer.runtime.request_io import Request
from deepinfer.runtime.sampling_params import SamplingParams
from deepinfer.runtime.shard_loader import load_rank_model

__all__ = ["LLM"]


class LLM:
    """A loaded plan: model with weights in their planned places, cache allocated as planned.

    Args:
        plan_dir: a directory written by ``deepinfer-compile`` (verified before anything loads).
        pipeline: the zero-overhead pipeline (post-processing overlapped with the next step).
        cuda_graphs: on a CUDA plan, capture the plan's decode buckets at start and replay
            them for every decode step (``runtime/decode_graphs.py``); False runs eagerly.
        log: start-up progress lines (weights loaded, each decode graph captured), or None.
        seed: engine seed (requests without a seed use ``seed + prompt index``); also the seed
            of synthetic weights when the plan says ``weights: synthetic``.

    ``startup_s`` holds the start-up times: ``load`` (plan verified, weights in place) and
    ``graphs`` (CUDA-graph capture, incl. compiling the kernels on a cold Triton cache).
    """

    def __init__(self, plan_dir: str | Path, *, pipeline: bool = True, seed: int = 0,
                 cuda_graphs: bool = True, log: Callable[[str], None] | None = None):
        t0 = time.perf_counter()
        self.plan: RuntimePlan = load_runtime_plan(plan_dir)
        self.dist: RankContext | None = init_distributed(self.plan)  # None: a one-rank plan
        device = plan_device(self.plan.device)  # after init: a rank's current GPU
        if device.type == "cuda":  # before the first kernel compiles
            cache_dir, why = use_plan_kernel_cache(plan_dir)
            if log is not None:
                log(f"compiled kernels: {cache_dir or 'default location'} ({why})")
        kernels = planned_kernels(self.plan.kernels, self.plan.spec, device, self.plan.source,
                                  int(self.plan.scheduler["max_model_len_tokens"]))
        rank = 0 if self.dist is None else self.dist.rank
        # The loader builds on meta and streams the weights straight onto ``device`` (synthetic
        # weights are generated there); the model it returns lives there entirely.
        self.loaded = load_rank_model(self.plan, rank, kernels,
                                      None if self.dist is None else self.dist.ep_exchange, seed=0,
                                      device=device)
        t1 = time.perf_counter()
        if log is not None:
            log(f"plan verified and weights in place on {device} in {t1 - t0:.1f} s")
            twins = sum(b.nbytes for name, b in self.loaded.model.named_buffers()
                        if name.endswith("bf16_twin"))
            if twins:
                log(f"bf16 twins of the FP8 projections for the prefill GEMMs: "
                    f"{twins / 2**30:.2f} GiB (plan cache.prefill_bf16_weights)")
        self.engine = Engine(self.plan, self.loaded, pipeline=pipeline, seed=seed,
                             cuda_graphs=cuda_graphs, log=log,
                             allreduce_max=None if self.dist is None else self.dist.allreduce_max)
        self.startup_s = {"load": t1 - t0, "graphs": time.perf_counter() - t1}

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
            on_rejected: Callable[[Request, str], None] | None = None, *,
            collect_on_rank0: bool = False) -> None:
        """Queue ``requests`` and step until all finished; ``on_finished`` gets each output as
        soon as its request finishes (a copy). A request the engine cannot run (e.g. longer than
        the cache can ever hold) goes to ``on_rejected`` with the reason, or raises ValueError
        when no ``on_rejected`` is given. Multi-rank: collective (see the module docstring);
        ``collect_on_rank0`` hands every rank's outputs and rejections to rank 0's callbacks."""
        if self.dist is not None:
            run_lockstep(self.engine, self.dist, requests, on_finished, on_rejected,
                         to_rank0=collect_on_rank0)
            return
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
