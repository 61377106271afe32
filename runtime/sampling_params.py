"""SamplingParams: how one request samples and when it stops; validated on construction."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_LOGPROBS = 20  # most top logprobs a request may ask for per token
MAX_SEED = (1 << 63) - 1  # seeds are int64 in the sampler


class SamplingParamsError(ValueError):
    """A sampling field has a bad type or value; the message names the field."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request sampling and stopping (frozen: share or copy freely).

    Attributes:
        temperature: divides the logits before sampling; 0 = greedy (argmax, lowest id on ties).
        top_p: nucleus mass in (0, 1]; 1 = off.
        top_k: keep the k most probable tokens; -1 or 0 = off.
        min_p: drop tokens with probability < min_p * max probability; 0 = off.
        seed: the request's sampling seed; None = the engine seed + the request's index. The
            tokens depend only on (seed, output position, logits), never on the batch.
        max_tokens: most output tokens (the finish reason is ``length`` when reached).
        stop: strings that end the output; the text is cut before the first one found.
        stop_token_ids: token ids that end the output (kept in ``token_ids``, not in the text).
        ignore_eos: keep generating after the EOS token (it is then an ordinary token).
        logprobs: None = none; n >= 0 = the sampled token's logprob plus the n most probable
            tokens' logprobs, from the raw (not temperature-scaled, unfiltered) distribution.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None

    def __post_init__(self) -> None:
        _check_float("temperature", self.temperature, low=0.0)
        _check_float("top_p", self.top_p, low=0.0, low_open=True, high=1.0)
        _check_int("top_k", self.top_k, low=-1)
        _check_float("min_p", self.min_p, low=0.0, high=1.0)
        if self.seed is not None:
            _check_int("seed", self.seed, low=0, high=MAX_SEED)
        _check_int("max_tokens", self.max_tokens, low=1)
        # Lists (e.g. from JSON) become tuples so the object stays hashable and immutable.
        object.__setattr__(self, "stop", _stop_strings(self.stop))
        object.__setattr__(self, "stop_token_ids", _token_ids(self.stop_token_ids))
        if not isinstance(self.ignore_eos, bool):
            raise SamplingParamsError(_bad_type("ignore_eos", self.ignore_eos, "a boolean"))
        if self.logprobs is not None:
            _check_int("logprobs", self.logprobs, low=0, high=MAX_LOGPROBS)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    def resolved_seed(self, engine_seed: int, request_index: int) -> int:
        """The seed the sampler uses: ``seed``, or ``engine_seed + request_index`` (mod 2^63)."""
        if self.seed is not None:
            return self.seed
        return (engine_seed + request_index) & MAX_SEED

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any], source: str = "", line_no: int | None = None,
                  *, base: SamplingParams | None = None) -> SamplingParams:
        """``base`` (default: the defaults) with ``fields`` replaced, e.g. from one JSONL line.

        Raises:
            SamplingParamsError: an unknown field (the message lists the allowed ones) or a bad
                value; prefixed with ``source:line_no:`` when given.
        """
        where = _location(source, line_no)
        allowed = cls.field_names()
        for name in fields:
            if name not in allowed:
                raise SamplingParamsError(f"{where}unknown sampling field '{name}' (allowed: "
                                          f"{', '.join(allowed)})")
        try:
            return dataclasses.replace(base or cls(), **fields)
        except SamplingParamsError as err:
            raise SamplingParamsError(f"{where}{err}") from None


def _location(source: str, line_no: int | None) -> str:
    """``"file:3: "``, ``"file: "`` or ``""``: the prefix of an error message."""
    if line_no is not None:
        return f"{source}:{line_no}: "
    return f"{source}: " if source else ""


def _bad_type(name: str, value: Any, expected: str) -> str:
    return f"sampling field '{name}' must be {expected}, got {value!r}"


def _check_float(name: str, value: Any, *, low: float, high: float | None = None,
                 low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SamplingParamsError(_bad_type(name, value, "a finite number"))
    if value < low or (low_open and value == low) or (high is not None and value > high):
        low_bracket = "(" if low_open else "["
        high_text = f"{high}]" if high is not None else "inf)"
        raise SamplingParamsError(f"sampling field '{name}' must be in {low_bracket}{low}, "
                                  f"{high_text}, got {value!r}")


def _check_int(name: str, value: Any, *, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SamplingParamsError(_bad_type(name, value, "an integer"))
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise SamplingParamsError(f"sampling field '{name}' must be {bound}, got {value}")


def _stop_strings(value: Any) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(s, str) and s for s in items):
        raise SamplingParamsError(_bad_type("stop", value, "a non-empty string or a list of them"))
    return tuple(items)


def _token_ids(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        raise SamplingParamsError(_bad_type("stop_token_ids", value,
                                            "a list of non-negative integers"))
    return tuple(value)
