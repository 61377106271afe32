"""A plain greedy batch generator over the model, used by ``deepinfer-run`` until plans land.

Every prompt is prefilled in one batched forward, then all unfinished sequences decode together
one token per step. It is deliberately simple: no scheduler, no paging, no sampling options.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files

from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.cache import SequenceCache
from deepinfer.runtime.model_loader import LoadedModel


@dataclass
class DemoResult:
    id: str
    prompt: str
    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" (EOS) or "length"


def demo_prompts() -> list[dict]:
    """The built-in demo batch: ``[{"id": ..., "prompt": ...}, ...]``."""
    path = files("deepinfer.artifacts") / "builtin" / "demo_prompts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def greedy_generate(lm: LoadedModel, prompts: list[dict], max_tokens: int) -> list[DemoResult]:
    tok, model = lm.tokenizer, lm.model
    ids = [tok.encode(p["prompt"]) or [tok.bos_id or 0] for p in prompts]
    caches = [SequenceCache.empty(lm.spec) for _ in prompts]
    outputs: list[list[int]] = [[] for _ in prompts]
    live = list(range(len(prompts)))
    chunks = ids
    while live and max_tokens > 0:
        logits = model(ForwardBatch.build(chunks, [caches[b] for b in live]), all_logits=False)
        next_ids = logits.argmax(-1).tolist()
        still = []
        for b, t in zip(live, next_ids, strict=True):
            outputs[b].append(t)
            if t != lm.spec.eos_token_id and len(outputs[b]) < max_tokens:
                still.append(b)
        live = still
        chunks = [[outputs[b][-1]] for b in live]
    return [DemoResult(str(p.get("id", i)), p["prompt"], tok.decode(out), out,
                       "stop" if out and out[-1] == lm.spec.eos_token_id else "length")
            for i, (p, out) in enumerate(zip(prompts, outputs, strict=True))]
