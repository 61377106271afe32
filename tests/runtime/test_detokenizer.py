"""Incremental detokenization (split UTF-8 characters, escapes, long outputs) and stop rules."""

from __future__ import annotations

import random

import pytest

from deepinfer.runtime.detokenizer import (
    MAX_WINDOW_TOKENS,
    IncrementalDetokenizer,
    RequestDetokenizer,
)
from deepinfer.runtime.sampling_params import SamplingParams
from deepinfer.runtime.tokenizer import Tokenizer, load_tokenizer

EOS = 1
ESCAPE = "\ue001"  # the tiny tokenizer's escape: ESCAPE + "a" decodes to "A"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer("builtin:tiny")


def random_text(rng: random.Random, num_chars: int) -> str:
    alphabet = "abcdefgh ijkl THE Quick,.!?\n\t" + "éüß日本語🦊€" + "0123"
    return "".join(rng.choice(alphabet) for _ in range(num_chars))


@pytest.mark.parametrize("seed", range(6))
def test_incremental_text_is_always_a_prefix_and_ends_equal(tok, seed):
    text = random_text(random.Random(seed), 30 + 40 * seed)  # up to ~800 tokens: commits happen
    ids = tok.encode(text)
    detok = IncrementalDetokenizer(tok)
    previous = ""
    for token_id in ids:
        detok.append(token_id)
        # Never retracted: each step's text extends the previous one and is a prefix of the
        # final text; except a trailing escape, which the next token rewrites ('\ue001a' -> 'A').
        assert detok.text.startswith(previous)
        previous = detok.text.removesuffix(ESCAPE)
        assert text.startswith(previous)
    assert detok.text == detok.final_text == text
    assert detok.num_final_chars > 0


def test_a_split_character_appears_only_when_complete(tok):
    ids = tok.encode("a🦊")
    assert len(ids) == 5  # 'a' + four byte tokens
    detok = IncrementalDetokenizer(tok)
    seen = []
    for token_id in ids:
        detok.append(token_id)
        seen.append(detok.text)
    assert seen == ["a", "a", "a", "a", "a🦊"]


def test_an_unfinished_character_reads_as_replacement_at_the_end(tok):
    ids = tok.encode("é")[:1]
    detok = IncrementalDetokenizer(tok)
    detok.append(ids[0])
    assert detok.text == "" and detok.final_text == tok.decode(ids) == "\ufffd"


def test_a_token_that_rewrites_the_previous_one(tok):
    ids = tok.encode("xA")  # 'x', ESCAPE, 'a': the decoder fuses ESCAPE + 'a' into 'A'
    detok = IncrementalDetokenizer(tok)
    for token_id in ids:
        detok.append(token_id)
    assert detok.text == "xA"


def test_garbage_byte_runs_stay_bounded(tok):
    stray = tok.token_to_id("<0x80>")
    detok = IncrementalDetokenizer(tok)
    for _ in range(3 * MAX_WINDOW_TOKENS):
        detok.append(stray)
    assert len(detok.token_ids) - detok._num_committed <= MAX_WINDOW_TOKENS
    assert set(detok.final_text) == {"\ufffd"}


def run(tok: Tokenizer, params: SamplingParams, ids: list[int], **kwargs) -> RequestDetokenizer:
    request = RequestDetokenizer(tok, params, EOS, **kwargs)
    for token_id in ids:
        if request.append(token_id) is not None:
            break
    return request


def test_stop_string_across_tokens_cuts_the_text(tok):
    ids = tok.encode("hello world. Next sentence")
    request = run(tok, SamplingParams(stop=["d. N"], max_tokens=100), ids)
    assert request.finish_reason == "stop" and request.text == "hello worl"
    assert tok.decode(request.token_ids).endswith("d. N")  # stops at the completing token


def test_the_first_stop_string_to_complete_wins_then_the_earliest_start(tok):
    # "two" completes (at index 4) before "o t" (index 6) exists.
    request = run(tok, SamplingParams(stop=["four", "o t", "two"], max_tokens=100),
                  tok.encode("one two three four"))
    assert request.text == "one "
    # Both complete with the token 'c': the one starting earlier cuts the text.
    ids = tok.encode("xabcy")
    assert [tok.decode([i]) for i in ids] == ["x", "ab", "c", "y"]
    request = run(tok, SamplingParams(stop=["bc", "abc"], max_tokens=100), ids)
    assert request.text == "x" and request.token_ids == ids[:3]


def test_stop_string_with_a_multibyte_character(tok):
    request = run(tok, SamplingParams(stop=["🦊"], max_tokens=100), tok.encode("ab🦊cd"))
    assert request.text == "ab" and request.finish_reason == "stop"
    assert len(request.token_ids) == 5  # 'ab' and the fox's four byte tokens


def test_stop_token_and_eos_are_kept_as_ids_but_not_as_text(tok):
    z = tok.token_to_id("z")
    ids = tok.encode("abc") + [z] + tok.encode("def")
    request = run(tok, SamplingParams(stop_token_ids=[z], max_tokens=100), ids)
    assert request.finish_reason == "stop" and request.text == "abc"
    assert request.token_ids == ids[: ids.index(z) + 1]
    with_eos = tok.encode("hi") + [EOS] + tok.encode("more")
    eos_at = with_eos.index(EOS)
    request = run(tok, SamplingParams(max_tokens=100), with_eos)
    assert (request.text, request.finish_reason) == ("hi", "stop")
    assert request.token_ids == with_eos[: eos_at + 1]
    request = run(tok, SamplingParams(max_tokens=eos_at + 2, ignore_eos=True), with_eos)
    assert request.finish_reason == "length" and request.token_ids == with_eos[: eos_at + 2]
    assert request.text == "hi" + tok.decode([with_eos[eos_at + 1]])


def test_length_from_max_tokens_or_max_model_len(tok):
    ids = tok.encode("abcdefghij")
    texts = [tok.decode([i]) for i in ids]
    request = run(tok, SamplingParams(max_tokens=4), ids)
    assert (request.finish_reason, request.text) == ("length", "".join(texts[:4]))
    request = run(tok, SamplingParams(max_tokens=100), ids, num_prompt_tokens=7, max_model_len=10)
    assert (request.finish_reason, request.text) == ("length", "".join(texts[:3]))


def test_stop_beats_length_on_the_same_token(tok):
    ids = tok.encode("abcd")
    assert [tok.decode([i]) for i in ids] == ["ab", "c", "d"]
    request = run(tok, SamplingParams(max_tokens=2, stop=["c"]), ids)
    assert (request.finish_reason, request.text) == ("stop", "ab")
    request = run(tok, SamplingParams(max_tokens=2), tok.encode("a") + [EOS])
    assert (request.finish_reason, request.text) == ("stop", "a")


def test_no_token_after_finish(tok):
    request = run(tok, SamplingParams(max_tokens=1), tok.encode("ab"))
    with pytest.raises(RuntimeError, match="already finished"):
        request.append(5)


def test_unfinished_request_hides_a_partial_character(tok):
    ids = tok.encode("a🦊")[:3]
    request = run(tok, SamplingParams(max_tokens=100), ids)
    assert request.finish_reason is None and request.text == "a"
    request = run(tok, SamplingParams(max_tokens=3), ids)
    assert request.finish_reason == "length" and request.text == "a\ufffd\ufffd"
