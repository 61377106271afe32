"""The Python API's input side: prompts and sampling parameters -> validated requests.

``LLM.generate`` (added with the engine) calls :func:`normalize_prompts` first, so every prompt
is checked before any work starts, with the same rules as the JSONL input
(``request_io.validate_prompt``), and returns copies of its outputs (``RequestOutput.copy``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from deepinfer.runtime.request_io import (
    PromptLimits,
    Request,
    RequestError,
    validate_prompt,
)
from deepinfer.runtime.sampling_params import SamplingParams
from deepinfer.runtime.tokenizer import Tokenizer

PROMPT_DICT_FIELDS = ("prompt", "prompt_token_ids", "images")

# One prompt: text, token ids, or {"prompt": ...} / {"prompt_token_ids": [...], "images": [...]}.
PromptInput = str | Sequence[int] | Mapping[str, Any]


def normalize_prompts(prompts: PromptInput | Sequence[PromptInput],
                      sampling_params: SamplingParams | Sequence[SamplingParams] | None,
                      tokenizer: Tokenizer | None, max_model_len: int, *,
                      vocab_size: int | None = None, image_token_id: int | None = None,
                      base_dir: Path = Path()) -> list[Request]:
    """Validated requests, request ids ``"0"``, ``"1"``, … in prompt order.

    Args:
        prompts: one prompt or a list of them. A list of integers is ONE token-id prompt; a
            list of strings, of integer lists or of dicts is a batch; ``[]`` is no prompts.
        sampling_params: None (defaults), one ``SamplingParams`` applied to every prompt, or
            one per prompt. Each request gets its own copy.
        tokenizer: encodes text prompts (as-is, no special tokens added).
        max_model_len: a prompt may have at most ``max_model_len - 1`` tokens.
        vocab_size: token ids must be below it (default: the tokenizer's vocabulary size).
        image_token_id: the image token of the model (None: images are rejected).
        base_dir: relative image ``embeds_path`` values are resolved against it.
    Raises:
        ValueError: ``"prompts[3]: <what is wrong>"`` for the first bad prompt, or a mismatch
            between the number of prompts and of sampling parameters.
    """
    batch = _as_batch(prompts)
    params = _params_per_prompt(sampling_params, len(batch))
    if vocab_size is None:
        if tokenizer is None:
            raise ValueError("normalize_prompts needs vocab_size when no tokenizer is given")
        vocab_size = tokenizer.vocab_size
    limits = PromptLimits(tokenizer, vocab_size, max_model_len, image_token_id, base_dir)
    requests = []
    for i, (prompt, p) in enumerate(zip(batch, params, strict=True)):
        try:
            ids, text, images = validate_prompt(_as_fields(prompt), limits)
        except RequestError as err:
            raise ValueError(f"prompts[{i}]: {err}") from None
        requests.append(Request(str(i), ids, dataclasses.replace(p), index=i, prompt=text,
                                images=images))
    return requests


def _is_token_ids(x: Any) -> bool:
    return (isinstance(x, list | tuple) and len(x) > 0
            and all(isinstance(t, int) and not isinstance(t, bool) for t in x))


def _as_batch(prompts: Any) -> list[Any]:
    if isinstance(prompts, str | Mapping) or _is_token_ids(prompts):
        return [prompts]
    if isinstance(prompts, list | tuple):
        return list(prompts)
    raise ValueError(f"prompts must be a string, a list of token ids, a prompt dict, or a list "
                     f"of those; got {type(prompts).__name__}")


def _as_fields(prompt: Any) -> Mapping[str, Any]:
    if isinstance(prompt, str):
        return {"prompt": prompt}
    if isinstance(prompt, Mapping):
        unknown = [k for k in prompt if k not in PROMPT_DICT_FIELDS]
        if unknown:
            raise RequestError(f"unknown field '{unknown[0]}' (allowed: "
                               f"{', '.join(PROMPT_DICT_FIELDS)})")
        return prompt
    if isinstance(prompt, list | tuple):
        return {"prompt_token_ids": prompt}
    raise RequestError(f"a prompt must be a string, a list of token ids or a dict, got "
                       f"{type(prompt).__name__}")


def _params_per_prompt(sampling_params: Any, num_prompts: int) -> list[SamplingParams]:
    if sampling_params is None:
        return [SamplingParams()] * num_prompts
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * num_prompts
    if not isinstance(sampling_params, list | tuple):
        raise ValueError(f"sampling_params must be None, a SamplingParams or a list of them, got "
                         f"{type(sampling_params).__name__}")
    if len(sampling_params) != num_prompts:
        raise ValueError(f"{len(sampling_params)} sampling params for {num_prompts} prompts")
    for i, p in enumerate(sampling_params):
        if not isinstance(p, SamplingParams):
            raise ValueError(f"sampling_params[{i}] is a {type(p).__name__}, not SamplingParams")
    return list(sampling_params)
