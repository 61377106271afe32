"""Incremental detokenization and stop checks for one request.

``IncrementalDetokenizer`` turns output token ids into text one token at a time without
re-decoding the whole output each step. Its text is ``head + tail``: ``head`` is final (the
committed tokens), ``tail`` is re-decoded every step from a window of the newest tokens, with a
few committed tokens before it as context (so decoders that treat a sequence's first token
specially, e.g. leading-space rules, see the same context). The window keeps at least
``HOLD_TOKENS`` tokens; older tokens are committed once their text is a prefix of the window's
text and does not end in U+FFFD. So a character split over several byte tokens (UTF-8, up to 4)
is never emitted half-done: ``text`` leaves out the tokens of an unfinished character. A token
whose text the *next* token rewrites (the tiny tokenizer's escape prefix) shows as-is for one
step, then is corrected; only ``text``'s last character can change that way.

Limitation: HF ``tokenizers``' ByteFallback replaces a *whole run* of byte tokens by U+FFFD when
any byte of the run is invalid UTF-8, so for invalid byte sequences the text may differ from a
one-shot ``decode`` of the same ids; valid text always matches (tested).

``RequestDetokenizer`` adds the stop rules of ``SamplingParams`` (order of checks per token):
1. a stop token id, or EOS unless ``ignore_eos``: finish ``stop``; the token stays in
   ``token_ids`` but its text is not added;
2. a stop string anywhere in the text: finish ``stop``; the text is cut before the earliest one;
3. ``max_tokens`` output tokens, or prompt + output reaching ``max_model_len``: finish ``length``.
"""

from __future__ import annotations

from deepinfer.runtime.outputs import FinishReason
from deepinfer.runtime.sampling_params import SamplingParams
from deepinfer.runtime.tokenizer import Tokenizer

HOLD_TOKENS = 4  # newest tokens always re-decoded (a UTF-8 character spans at most 4 bytes)
CONTEXT_TOKENS = 4  # committed tokens decoded before the window as context
MAX_WINDOW_TOKENS = 64  # commit regardless beyond this (bounds the cost of garbage byte runs)
REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Output text of a growing list of token ids (see the module docstring)."""

    def __init__(self, tokenizer: Tokenizer, *, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self.token_ids: list[int] = []
        self._head = ""  # final text of token_ids[:self._num_committed]
        self._num_committed = 0
        self._tail = ""  # text of token_ids[self._num_committed:], re-decoded each append
        self._complete_tail = ""  # the longest prefix of it that ends on a complete character

    @property
    def num_final_chars(self) -> int:
        """Characters of ``text`` that no later token can change."""
        return len(self._head)

    @property
    def text(self) -> str:
        """The text so far, without a trailing incomplete character."""
        return self._head + self._complete_tail

    @property
    def final_text(self) -> str:
        """The text if no token follows (an incomplete last character reads as U+FFFD)."""
        return self._head + self._tail

    def append(self, token_id: int) -> None:
        """Add one token; O(window) decoding work, not O(output length)."""
        self.token_ids.append(token_id)
        self._tail = self._decode_after(self._num_committed, len(self.token_ids))
        self._maybe_commit()
        self._complete_tail = self._tail_without_partial_character()

    def _tail_without_partial_character(self) -> str:
        """The tail without its last (up to 4) tokens if they end in an incomplete character.

        Dropping whole tokens, not just trailing U+FFFD, matters for ByteFallback, which turns a
        complete character into U+FFFD too while its byte run ends with a partial one.
        """
        end = len(self.token_ids)
        for num_dropped in range(HOLD_TOKENS + 1):
            if end - num_dropped < self._num_committed:
                break
            text = self._tail if num_dropped == 0 else self._decode_after(
                self._num_committed, end - num_dropped)
            if not text.endswith(REPLACEMENT_CHAR):
                return text
        return self._tail.rstrip(REPLACEMENT_CHAR)

    def _decode(self, start: int, end: int) -> str:
        return self._tokenizer.decode(self.token_ids[start:end],
                                      skip_special_tokens=self._skip_special_tokens)

    def _decode_after(self, start: int, end: int) -> str:
        """Text of ``token_ids[start:end]`` as it reads after the tokens before ``start``."""
        # The context must not open mid-character: a leading fragment decodes to U+FFFD, and
        # ByteFallback would then also replace the rest of its byte run.
        for context in range(max(0, start - CONTEXT_TOKENS), start):
            before = self._decode(context, start)
            if not before.startswith(REPLACEMENT_CHAR):
                return self._decode(context, end)[len(before):]
        return self._decode(start, end)

    def _maybe_commit(self) -> None:
        num_window = len(self.token_ids) - self._num_committed
        if num_window < 2 * HOLD_TOKENS:
            return
        boundary = len(self.token_ids) - HOLD_TOKENS
        left = self._decode_after(self._num_committed, boundary)
        is_clean = self._tail.startswith(left) and not left.endswith(REPLACEMENT_CHAR)
        if not is_clean and num_window < MAX_WINDOW_TOKENS:
            return
        self._head += left
        self._num_committed = boundary
        self._tail = self._decode_after(boundary, len(self.token_ids))


class RequestDetokenizer:
    """Token ids in, text and finish reason out, for one request.

    Args:
        tokenizer: the model's tokenizer.
        params: the request's sampling parameters (stop rules, max_tokens).
        eos_token_id: the model's EOS id (None: no EOS rule).
        num_prompt_tokens, max_model_len: prompt + output may not exceed ``max_model_len``
            (None: no limit besides ``max_tokens``).
    """

    def __init__(self, tokenizer: Tokenizer, params: SamplingParams, eos_token_id: int | None,
                 *, num_prompt_tokens: int = 0, max_model_len: int | None = None) -> None:
        self.params = params
        self.finish_reason: FinishReason | None = None
        self._token_ids: list[int] = []
        self._detokenizer = IncrementalDetokenizer(tokenizer)
        self._stop_ids = set(params.stop_token_ids)
        if eos_token_id is not None and not params.ignore_eos:
            self._stop_ids.add(eos_token_id)
        self._max_stop_chars = max((len(s) for s in params.stop), default=0)
        self._cut_text: str | None = None  # the text when cut at a stop string
        self.max_output_tokens = params.max_tokens
        if max_model_len is not None:
            self.max_output_tokens = min(self.max_output_tokens, max_model_len - num_prompt_tokens)

    @property
    def token_ids(self) -> list[int]:
        return self._token_ids

    @property
    def text(self) -> str:
        """The output text: complete characters only while running, everything once finished."""
        if self._cut_text is not None:
            return self._cut_text
        if self.finish_reason is not None:
            return self._detokenizer.final_text
        return self._detokenizer.text

    def append(self, token_id: int) -> FinishReason | None:
        """Add one sampled token; returns the finish reason once the request is done."""
        if self.finish_reason is not None:
            raise RuntimeError(f"request already finished ({self.finish_reason}); "
                               f"token {token_id} cannot be added")
        self._token_ids.append(token_id)
        if token_id in self._stop_ids:
            self.finish_reason = "stop"
            return self.finish_reason
        search_from = max(0, self._detokenizer.num_final_chars - self._max_stop_chars + 1)
        self._detokenizer.append(token_id)
        cut = self._find_stop_string(search_from)
        if cut is not None:
            self._cut_text = self._detokenizer.text[:cut]
            self.finish_reason = "stop"
        elif len(self._token_ids) >= self.max_output_tokens:
            self.finish_reason = "length"
        return self.finish_reason

    def _find_stop_string(self, search_from: int) -> int | None:
        """Index of the earliest stop string in the text at or after ``search_from``, or None."""
        if not self.params.stop:
            return None
        text = self._detokenizer.text
        hits = [i for i in (text.find(s, search_from) for s in self.params.stop) if i >= 0]
        return min(hits) if hits else None
