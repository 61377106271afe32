"""JSONL request input (one rejection per bad line, the rest proceed), the crash-safe results
writer with resume, image spans, and ``api.normalize_prompts``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import save_file

from deepinfer.runtime.api import normalize_prompts
from deepinfer.runtime.outputs import RequestOutput, TokenLogprobs
from deepinfer.runtime.request_io import (
    PromptLimits,
    Rejection,
    Request,
    RequestError,
    ResultsFileError,
    ResultsWriter,
    load_image_embeds,
    read_finished_ids,
    read_requests,
    result_record,
)
from deepinfer.runtime.sampling_params import SamplingParams
from deepinfer.runtime.tokenizer import Tokenizer, load_tokenizer

IMAGE = 511  # the tiny tokenizer's <|image|>
HIDDEN = 8


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer("builtin:tiny")


@pytest.fixture
def limits(tok, tmp_path) -> PromptLimits:
    save_file({"embeds": torch.zeros(2, HIDDEN)}, str(tmp_path / "img.safetensors"))
    return PromptLimits(tok, vocab_size=512, max_model_len=16, image_token_id=IMAGE,
                        base_dir=tmp_path, default_params=SamplingParams(max_tokens=8))


def parse(limits: PromptLimits, *lines: str) -> list[Request | Rejection]:
    return list(read_requests(lines, limits))


def test_valid_lines(tok, limits):
    items = parse(limits,
                  '{"id": "a", "prompt": "hello"}',
                  "",
                  '{"id": 7, "prompt_token_ids": [5, 6, 7], "temperature": 0, "stop": ["x"]}')
    assert [type(i) for i in items] == [Request, Request]
    a, b = items
    assert (a.request_id, a.prompt_token_ids, a.prompt, a.index) == (
        "a", tuple(tok.encode("hello")), "hello", 0)
    assert a.params == SamplingParams(max_tokens=8)  # the defaults
    assert (b.request_id, b.prompt_token_ids, b.prompt, b.index) == ("7", (5, 6, 7), None, 2)
    assert b.params == SamplingParams(max_tokens=8, temperature=0, stop=("x",))


@pytest.mark.parametrize(
    "line, request_id, error",
    [
        ('{"id": "a", "prompt": "hi"', None, "malformed JSON"),
        ('["id", "a"]', None, "a request must be a JSON object, got list"),
        ('{"prompt": "hi"}', None, "missing field 'id'"),
        ('{"id": true, "prompt": "hi"}', None, "field 'id' must be a non-empty string or an int"),
        ('{"id": "a", "prompt": "hi", "prompt_token_ids": [3]}', "a",
         r"exactly one of .*\(both given\)"),
        ('{"id": "a"}', "a", r"exactly one of .*\(neither given\)"),
        ('{"id": "a", "prompt": ""}', "a", "field 'prompt' is empty"),
        ('{"id": "a", "prompt": 5}', "a", "field 'prompt' must be a string, got int"),
        ('{"id": "a", "prompt_token_ids": []}', "a", "field 'prompt_token_ids' is empty"),
        ('{"id": "a", "prompt_token_ids": [1, 512]}', "a",
         r"prompt_token_ids\[1\] = 512 is outside the vocabulary \[0, 512\)"),
        ('{"id": "a", "prompt_token_ids": [1, "2"]}', "a", r"prompt_token_ids\[1\] = '2' is not"),
        ('{"id": "a", "prompt_token_ids": [1, 2.0]}', "a", r"prompt_token_ids\[1\] = 2.0 is not"),
        ('{"id": "a", "prompt_token_ids": [1, 2, true]}', "a",
         r"prompt_token_ids\[2\] = True is not"),
        ('{"id": "a", "prompt_token_ids": [4, -1, 3]}', "a",
         r"prompt_token_ids\[1\] = -1 is outside the vocabulary"),
        ('{"id": "a", "prompt_token_ids": ' + str(list(range(16))) + "}", "a",
         "prompt has 16 tokens; the max model length is 16"),
        ('{"id": "a", "prompt": "' + "x" * 16 + '"}', "a", "prompt has 16 tokens"),
        ('{"id": "a", "prompt": "hi", "topp": 0.5}', "a",
         "unknown field 'topp' \\(allowed: id, prompt, prompt_token_ids, images, and the "
         "sampling fields temperature, top_p"),
        ('{"id": "a", "prompt": "hi", "top_p": 0}', "a", "sampling field 'top_p' must be in"),
    ],
)
def test_each_bad_line_is_rejected_alone(limits, line, request_id, error):
    before, bad, after = parse(limits, '{"id": "x", "prompt": "ok"}', line,
                               '{"id": "y", "prompt": "ok"}')
    assert isinstance(before, Request) and isinstance(after, Request)
    assert isinstance(bad, Rejection)
    assert (bad.request_id, bad.line_no) == (request_id, 2)
    assert re.search(error, bad.error), bad.error


def test_duplicate_id_rejects_the_later_line(limits):
    first, second = parse(limits, '{"id": 3, "prompt": "a"}', '{"id": "3", "prompt": "b"}')
    assert isinstance(first, Request)
    assert second == Rejection("3", "duplicate id (first on line 1)", 2)
    assert second.to_record() == {"id": "3", "error": "duplicate id (first on line 1)", "line": 2}
    assert second.describe("in.jsonl") == "in.jsonl:2: id '3': duplicate id (first on line 1)"


def test_text_prompts_need_a_tokenizer(limits):
    no_tok = PromptLimits(None, 512, 16)
    (bad,) = parse(no_tok, '{"id": "a", "prompt": "hi"}')
    assert "text prompts need a tokenizer" in bad.error


def test_skip_ids_on_resume(limits):
    items = parse(limits, '{"id": "a", "prompt": "x"}', '{"id": "b", "prompt": ""}',
                  '{"id": "c", "prompt": "z"}')
    assert [i.request_id for i in items] == ["a", "b", "c"]
    resumed = list(read_requests(['{"id": "a", "prompt": "x"}', '{"id": "b", "prompt": ""}',
                                  '{"id": "c", "prompt": "z"}'], limits, skip_ids={"a", "b"}))
    assert [(i.request_id, i.index) for i in resumed] == [("c", 2)]  # same index as before


def image_line(span, ids=None, path="img.safetensors", **extra) -> str:
    ids = ids if ids is not None else [5, IMAGE, IMAGE, 6]
    return json.dumps({"id": "m", "prompt_token_ids": ids,
                       "images": [{"span": span, "embeds_path": path, **extra}]})


def test_images(limits, tmp_path):
    (request,) = parse(limits, image_line([1, 3]))
    (image,) = request.images
    assert (image.begin, image.end, image.embeds_path) == (1, 3, tmp_path / "img.safetensors")
    assert load_image_embeds(image, HIDDEN).shape == (2, HIDDEN)
    with pytest.raises(RequestError, match=r"must have shape \(2, 16\), got shape \(2, 8\)"):
        load_image_embeds(image, 16)


@pytest.mark.parametrize(
    "line, error",
    [
        (image_line([1, 4]), r"images\[0\]: prompt_token_ids\[3\] = 6 .* not the image token"),
        (image_line([2, 2]), r"images\[0\].span \[2, 2\) must be non-empty"),
        (image_line([1, 9]), "inside the 4-token prompt"),
        (image_line([1]), r"images\[0\].span must be \[begin, end\]"),
        (image_line([1, 3], path="missing.safetensors"), "missing.safetensors' not found"),
        (image_line([1, 3], extra_field=1), "exactly the fields span, embeds_path"),
        ('{"id": "m", "prompt": "hi", "images": []}', "'images' needs 'prompt_token_ids'"),
        (json.dumps({"id": "m", "prompt_token_ids": [IMAGE, IMAGE, 5], "images": [
            {"span": [0, 2], "embeds_path": "img.safetensors"},
            {"span": [1, 2], "embeds_path": "img.safetensors"}]}), "after the previous span"),
    ],
)
def test_bad_images(limits, line, error):
    (bad,) = parse(limits, line)
    assert isinstance(bad, Rejection)
    assert re.search(error, bad.error), bad.error


def test_images_need_an_image_token(limits):
    text_only = PromptLimits(limits.tokenizer, 512, 16, image_token_id=None,
                             base_dir=limits.base_dir)
    (bad,) = parse(text_only, image_line([1, 3]))
    assert "this model has no image token" in bad.error


# --- results -------------------------------------------------------------------------------


def output(request_id: str, **kwargs) -> RequestOutput:
    defaults = dict(prompt_token_ids=[1, 2], text="hi", token_ids=[7, 8, 1],
                    finish_reason="stop")
    return RequestOutput(request_id, **(defaults | kwargs))


def test_result_records():
    assert result_record(output("a")) == {
        "id": "a", "text": "hi", "token_ids": [7, 8, 1], "finish_reason": "stop",
        "num_prompt_tokens": 2, "num_output_tokens": 3}
    with_lp = output("b", token_ids=[7], logprobs=[
        TokenLogprobs(7, -0.5, [(7, -0.5), (3, float("-inf"))])])
    assert result_record(with_lp)["logprobs"] == [
        {"token_id": 7, "logprob": -0.5, "top": [[7, -0.5], [3, None]]}]
    failed = result_record(output("c", finish_reason="error", error="NaN logits"))
    assert failed["error"] == "NaN logits"


def test_writer_appends_lines_and_resume_reads_them(tmp_path):
    path = tmp_path / "out.jsonl"
    with ResultsWriter(path) as writer:
        writer.write_output(output("a", text="é\n🦊"))
        writer.write_rejection(Rejection("b", "bad", 2))
        writer.write_rejection(Rejection(None, "malformed JSON", 3))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["a", "b", None]
    assert json.loads(lines[0])["text"] == "é\n🦊"
    assert read_finished_ids(path) == {"a", "b"}
    assert read_finished_ids(tmp_path / "absent.jsonl") == set()
    with ResultsWriter(path, resume=True) as writer:
        assert writer.num_torn_bytes == 0
        writer.write_output(output("c"))
    assert read_finished_ids(path) == {"a", "b", "c"}
    with ResultsWriter(path):  # a fresh (non-resume) run starts an empty file
        pass
    assert path.read_bytes() == b""


def test_a_torn_last_line_is_ignored_then_truncated_on_resume(tmp_path):
    path = tmp_path / "out.jsonl"
    with ResultsWriter(path) as writer:
        writer.write_output(output("a"))
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"id": "b", "text": "hal')  # the process died mid-write
    assert read_finished_ids(path) == {"a"}
    with ResultsWriter(path, resume=True) as writer:
        assert writer.num_torn_bytes == len(b'{"id": "b", "text": "hal')
        writer.write_output(output("b"))
    assert read_finished_ids(path) == {"a", "b"}
    assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == ["a", "b"]


def test_a_damaged_middle_line_is_an_error(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"id": "a"}\nnot json\n{"id": "b"}\n')
    with pytest.raises(ResultsFileError, match=r"out.jsonl:2: not a JSON line"):
        read_finished_ids(path)


def test_a_killed_writer_leaves_every_finished_line(tmp_path):
    """SIGKILL after each write: whatever is in the file is complete lines only."""
    path = tmp_path / "out.jsonl"
    script = textwrap.dedent(f"""
        import os, signal
        from deepinfer.runtime.outputs import RequestOutput
        from deepinfer.runtime.request_io import ResultsWriter
        writer = ResultsWriter({str(path)!r})
        for i in range(5):
            writer.write_output(RequestOutput(str(i), [1], "x" * 1000, [2], "length"))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    assert read_finished_ids(path) == {"0", "1", "2", "3", "4"}
    assert path.read_bytes().endswith(b"\n")
    assert os.path.getsize(path) > 5000


# --- api.normalize_prompts -----------------------------------------------------------------


def test_normalize_prompts_forms(tok, tmp_path):
    save_file({"embeds": torch.zeros(1, HIDDEN)}, str(tmp_path / "i.safetensors"))
    params = SamplingParams(temperature=0.5)
    requests = normalize_prompts(
        ["hello", [5, 6], {"prompt": "x"},
         {"prompt_token_ids": [IMAGE, 4], "images": [{"span": [0, 1],
                                                      "embeds_path": "i.safetensors"}]}],
        params, tok, max_model_len=32, image_token_id=IMAGE, base_dir=tmp_path)
    assert [r.request_id for r in requests] == ["0", "1", "2", "3"]
    assert [r.index for r in requests] == [0, 1, 2, 3]
    assert requests[0].prompt_token_ids == tuple(tok.encode("hello"))
    assert requests[1].prompt_token_ids == (5, 6) and requests[1].prompt is None
    assert requests[3].images[0].end == 1
    assert all(r.params == params for r in requests)
    assert len({id(r.params) for r in requests}) == 4  # a copy per request
    single = normalize_prompts([5, 6, 7], None, tok, 32)  # a list of ints is ONE prompt
    assert len(single) == 1 and single[0].params == SamplingParams()
    assert normalize_prompts("hi", None, tok, 32)[0].prompt == "hi"
    assert normalize_prompts([], None, tok, 32) == []


def test_normalize_prompts_per_prompt_params(tok):
    a, b = SamplingParams(seed=1), SamplingParams(seed=2)
    requests = normalize_prompts(["x", "y"], [a, b], tok, 32)
    assert [r.params.seed for r in requests] == [1, 2]
    with pytest.raises(ValueError, match="1 sampling params for 2 prompts"):
        normalize_prompts(["x", "y"], [a], tok, 32)
    with pytest.raises(ValueError, match=r"sampling_params\[1\] is a dict"):
        normalize_prompts(["x", "y"], [a, {"seed": 2}], tok, 32)


@pytest.mark.parametrize(
    "prompts, error",
    [
        (["ok", ""], r"prompts\[1\]: field 'prompt' is empty"),
        ([[1, 2], [3, 600]], r"prompts\[1\]: prompt_token_ids\[1\] = 600 is outside"),
        (["x" * 40], r"prompts\[0\]: prompt has 40 tokens; the max model length is 32"),
        ([{"text": "x"}], r"prompts\[0\]: unknown field 'text' \(allowed: prompt, "),
        ([3.5], r"prompts\[0\]: a prompt must be a string, a list of token ids or a dict"),
        (42, "prompts must be a string, a list of token ids, a prompt dict, or a list"),
        ([{"prompt_token_ids": [1], "images": []}], "this model has no image token"),
    ],
)
def test_normalize_prompts_errors(tok, prompts, error):
    with pytest.raises(ValueError, match=error):
        normalize_prompts(prompts, None, tok, max_model_len=32)
