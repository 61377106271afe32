"""The runtime: ``from deepinfer.runtime import LLM, SamplingParams`` over a compiled plan.

Imports are lazy so that ``import deepinfer.runtime.<module>`` stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LLM", "RequestOutput", "SamplingParams", "TokenLogprobs"]


def __getattr__(name: str) -> Any:
    if name == "LLM":
        from deepinfer.runtime.llm import LLM

        return LLM
    if name in ("RequestOutput", "TokenLogprobs"):
        from deepinfer.runtime import outputs

        return getattr(outputs, name)
    if name == "SamplingParams":
        from deepinfer.runtime.sampling_params import SamplingParams

        return SamplingParams
    raise AttributeError(f"module 'deepinfer.runtime' has no attribute {name!r}")
