"""What a finished request returns: plain data, no references into the engine.

The engine keeps its own per-request state and may reuse or keep mutating it after a request
finishes (the deferred post-processing of the zero-overhead pipeline touches step t-1's
objects while step t runs). ``LLM.generate`` therefore returns :meth:`RequestOutput.copy` of
every output: callers own what they get and may mutate it freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "preempted", "error"]
# stop: EOS, a stop token id or a stop string; length: max_tokens or the max model length;
# preempted: evicted and not resumed before the job ended; error: see RequestOutput.error.
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "preempted", "error")


@dataclass
class TokenLogprobs:
    """Logprobs of one output token (raw distribution: no temperature, no filters).

    Attributes:
        token_id: the sampled token.
        logprob: its log-probability.
        top: the ``SamplingParams.logprobs`` most probable ``(token_id, logprob)``, descending.
    """

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)

    def copy(self) -> TokenLogprobs:
        return TokenLogprobs(self.token_id, self.logprob, list(self.top))


@dataclass
class RequestOutput:
    """One request's result.

    Attributes:
        request_id: the id given in the input (a string).
        prompt_token_ids: the prompt as token ids.
        text: detokenized output, cut before a matched stop string; excludes the text of a final
            EOS / stop token.
        token_ids: every output token, a final EOS or stop token included.
        finish_reason: one of ``FINISH_REASONS``, or None while unfinished.
        logprobs: one entry per output token when ``SamplingParams.logprobs`` is set, else None.
        error: what went wrong when ``finish_reason == "error"``, else None.
    """

    request_id: str
    prompt_token_ids: list[int]
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    logprobs: list[TokenLogprobs] | None = None
    error: str | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    def copy(self) -> RequestOutput:
        """A deep copy: no list is shared with ``self``."""
        logprobs = None if self.logprobs is None else [lp.copy() for lp in self.logprobs]
        return RequestOutput(self.request_id, list(self.prompt_token_ids), self.text,
                             list(self.token_ids), self.finish_reason, logprobs, self.error)
