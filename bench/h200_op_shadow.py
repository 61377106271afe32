"""Every kernel op of the slice plan against its torch reference, on the model's own activations.

    TRITON_INTERPRET=0 python bench/h200_op_shadow.py [--prompts 2] [--tokens 3]

The Triton plan's model runs a few prompts (prefill, then decode steps) with a shadow
``KernelSet``: each op call also runs the ``reference`` implementation on clones of the same
inputs and records ||out - ref|| / ||ref|| (floating outputs) or the fraction of differing
elements (integer / bool outputs: top-k positions, candidate masks). Phases: ``eager`` (the
engine without graphs) and ``static`` (the graphs' static buffers and widths, run eagerly).
Prints one table per phase, worst op first: where a kernel disagrees on real shapes and data
that its unit tests did not cover.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from h200_slice_check import TOPOLOGY, make_plans, make_prompts, mc  # noqa: E402

from deepinfer.kernels.registry import REFERENCE, KernelSet, resolve  # noqa: E402


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, list | tuple):
        return type(x)(_clone(v) for v in x)
    return x


def _flat(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _flat(v)]
    return []


class ShadowKernels(KernelSet):
    """The inner set's ops, each call compared with the reference on cloned inputs."""

    def __init__(self, inner: KernelSet):
        super().__init__()
        self._inner = inner
        self.phase = "eager"
        self.worst: dict[tuple[str, str], tuple[float, str, int]] = {}

    def backend_of(self, op: str) -> str:
        return self._inner.backend_of(op)

    def __getattr__(self, op: str):
        fn = getattr(self._inner, op)
        if self._inner.backend_of(op) == REFERENCE:
            return fn
        ref = resolve(op, REFERENCE)

        def call(*args, **kwargs):
            want = ref(*_clone(args), **_clone(kwargs))
            got = fn(*args, **kwargs)
            self._record(op, got, want)
            return got
        return call

    def _record(self, op: str, got, want) -> None:
        err = 0.0
        for g, w in zip(_flat(got), _flat(want), strict=True):
            if g.shape != w.shape:
                err = float("inf")
                continue
            if g.is_floating_point():
                d = torch.where(g == w, 0.0, g.float() - w.float())  # equal infinities: 0
                d = d.nan_to_num(nan=1e30, posinf=1e30, neginf=-1e30)
                ref = w.float().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
                err = max(err, float(d.norm() / ref.norm().clamp(min=1e-30)))
            else:
                err = max(err, float((g != w).float().mean()) if g.numel() else 0.0)
        key = (self.phase, op)
        prev = self.worst.get(key, (-1.0, "", 0))
        shape = "x".join(map(str, _flat(got)[0].shape)) if _flat(got) else "-"
        self.worst[key] = (max(prev[0], err), shape if err > prev[0] else prev[1], prev[2] + 1)


@torch.no_grad()
def logits_of(model, prompt: list[int]) -> torch.Tensor:
    """(S, vocab) fp32 logits of a one-shot prefill of ``prompt`` on a fresh cache."""
    from deepinfer.runtime.model.batch import ForwardBatch
    from deepinfer.runtime.model.cache import SequenceCache

    cache = SequenceCache.empty(model.spec, model.device)
    return model(ForwardBatch.build([prompt], [cache], device=model.device), all_logits=True)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@torch.no_grad()
def sensitivity(model, prompt: list[int], kernels: KernelSet) -> dict[str, float]:
    """How far the logits of this (synthetic) model move under rounding-sized changes:
    the reference with one bf16 ulp of random noise on the prompt's input embeddings, and
    the plan's kernels, each against the clean reference (relative norms over all rows)."""
    model.kernels = KernelSet()  # reference everywhere
    clean = logits_of(model, prompt)
    ids = torch.tensor(sorted(set(prompt)), device=model.device)
    saved = model.embed.weight[ids].clone()
    g = torch.Generator(device=model.device).manual_seed(3)
    sign = torch.randint(0, 2, saved.shape, generator=g, device=model.device) * 2 - 1
    model.embed.weight[ids] = (saved.float() * (1 + sign * 2.0 ** -8)).bfloat16()
    noisy = logits_of(model, prompt)
    model.embed.weight[ids] = saved
    model.kernels = kernels
    ours = logits_of(model, prompt)
    return {"reference_1ulp_noise": rel(noisy, clean), "plan_kernels": rel(ours, clean),
            "first_row_1ulp_noise": rel(noisy[:1], clean[:1]),
            "first_row_plan_kernels": rel(ours[:1], clean[:1])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=3)
    ap.add_argument("--topology", default=str(TOPOLOGY))
    args = ap.parse_args()
    from deepinfer.runtime import LLM

    with tempfile.TemporaryDirectory() as tmp:
        dirs = make_plans(Path(tmp), args.topology)
        llm = LLM(dirs["triton"])
        model = llm.loaded.model
        shadow = ShadowKernels(model.kernels)
        model.kernels = shadow
        prompts = make_prompts(64, llm.loaded.spec.vocab_size)
        prompts = sorted(prompts, key=len)[:args.prompts]
        graphs = llm.engine.graphs
        if graphs is not None:
            graphs.replay = False  # static buffers and widths, run eagerly (shadow-able)
        shadow.phase = "static" if graphs is not None else "eager"
        mc.generate(llm, prompts, args.tokens)
        from deepinfer.runtime.engine import Engine

        llm.engine.worker.close()
        llm.engine = Engine(llm.plan, llm.loaded, cuda_graphs=False)
        shadow.phase = "eager"
        mc.generate(llm, prompts, args.tokens)
        llm.engine.worker.close()
        model.kernels = shadow._inner
        sens = sensitivity(model, prompts[0], shadow._inner)
    print("\nlogit sensitivity, ||logits - reference|| / ||reference|| over a prompt's rows "
          f"(len {len(prompts[0])}): " + ", ".join(f"{k} {v:.3g}" for k, v in sens.items()))
    for phase in ("eager", "static"):
        rows = sorted(((v, op) for (p, op), v in shadow.worst.items() if p == phase),
                      reverse=True)
        if not rows:
            continue
        print(f"\n{phase}: op | calls | worst rel err (float) or mismatch fraction | its shape")
        for (err, shape, calls), op in rows:
            print(f"  {op:34s} {calls:5d}  {err:10.3g}  {shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
