"""SamplingParams: defaults, validation errors that name the field, from_dict for JSONL lines."""

from __future__ import annotations

import dataclasses

import pytest

from deepinfer.runtime.sampling_params import MAX_LOGPROBS, SamplingParams, SamplingParamsError


def test_defaults_and_normalisation():
    p = SamplingParams()
    assert (p.temperature, p.top_p, p.top_k, p.min_p, p.seed, p.max_tokens) == (
        1.0, 1.0, -1, 0.0, None, 16)
    assert (p.stop, p.stop_token_ids, p.ignore_eos, p.logprobs) == ((), (), False, None)
    q = SamplingParams(stop="###", stop_token_ids=[5, 6], temperature=0)
    assert q.stop == ("###",) and q.stop_token_ids == (5, 6) and q.is_greedy
    assert hash(q) == hash(SamplingParams(stop=["###"], stop_token_ids=(5, 6), temperature=0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.temperature = 1.0


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("temperature", -0.1, r"'temperature' must be in \[0.0, inf\), got -0.1"),
        ("temperature", float("nan"), "'temperature' must be a finite number"),
        ("temperature", "1", "'temperature' must be a finite number, got '1'"),
        ("top_p", 0.0, r"'top_p' must be in \(0.0, 1.0\]"),
        ("top_p", 1.5, r"'top_p' must be in \(0.0, 1.0\]"),
        ("top_k", -2, "'top_k' must be >= -1, got -2"),
        ("top_k", 2.0, "'top_k' must be an integer"),
        ("min_p", 1.01, r"'min_p' must be in \[0.0, 1.0\]"),
        ("seed", -1, "'seed' must be between 0 and"),
        ("seed", 1 << 63, "'seed' must be between 0 and"),
        ("max_tokens", 0, "'max_tokens' must be >= 1, got 0"),
        ("max_tokens", True, "'max_tokens' must be an integer, got True"),
        ("stop", ["ok", ""], "'stop' must be a non-empty string or a list of them"),
        ("stop", 3, "'stop' must be a non-empty string or a list of them"),
        ("stop_token_ids", [1, -2], "'stop_token_ids' must be a list of non-negative integers"),
        ("stop_token_ids", 7, "'stop_token_ids' must be a list of non-negative integers"),
        ("ignore_eos", 1, "'ignore_eos' must be a boolean"),
        ("logprobs", -1, f"'logprobs' must be between 0 and {MAX_LOGPROBS}"),
        ("logprobs", MAX_LOGPROBS + 1, f"'logprobs' must be between 0 and {MAX_LOGPROBS}"),
    ],
)
def test_bad_values_name_the_field(field, value, message):
    with pytest.raises(SamplingParamsError, match=message):
        SamplingParams(**{field: value})


def test_from_dict_overrides_a_base():
    base = SamplingParams(temperature=0.0, max_tokens=64)
    p = SamplingParams.from_dict({"top_k": 5, "stop": ["\n\n"], "seed": 3}, base=base)
    assert (p.temperature, p.max_tokens, p.top_k, p.stop, p.seed) == (0.0, 64, 5, ("\n\n",), 3)
    assert SamplingParams.from_dict({}) == SamplingParams()


def test_from_dict_unknown_field_lists_the_allowed_ones():
    with pytest.raises(SamplingParamsError) as err:
        SamplingParams.from_dict({"topp": 0.9}, "prompts.jsonl", 4)
    text = str(err.value)
    assert text.startswith("prompts.jsonl:4: unknown sampling field 'topp' (allowed: ")
    assert all(name in text for name in SamplingParams.field_names())


def test_from_dict_bad_value_has_the_location():
    with pytest.raises(SamplingParamsError, match=r"^in.jsonl:9: sampling field 'top_p' must"):
        SamplingParams.from_dict({"top_p": 2}, "in.jsonl", 9)


def test_resolved_seed():
    assert SamplingParams(seed=11).resolved_seed(engine_seed=100, request_index=5) == 11
    assert SamplingParams().resolved_seed(engine_seed=100, request_index=5) == 105
    assert SamplingParams().resolved_seed((1 << 63) - 1, 1) == 0  # wraps into int64 range
