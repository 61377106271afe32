"""Request input (JSONL) and results output (JSONL, crash-safe, resumable).

Formats: ``docs/formats.md``. Input lines are validated one by one: a bad line becomes a
:class:`Rejection` (written to the results and stderr by the caller) and the other lines proceed.
:func:`validate_prompt` is shared with ``api.normalize_prompts``. The :class:`ResultsWriter`
appends one line per finished request and fsyncs it, so the file always holds every request
finished so far; ``--resume`` reads the ids already answered (:func:`read_finished_ids`) and the
writer truncates a line torn by a crash before appending.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from deepinfer.runtime.outputs import RequestOutput
from deepinfer.runtime.sampling_params import SamplingParams, SamplingParamsError
from deepinfer.runtime.tokenizer import Tokenizer

REQUEST_FIELDS = ("id", "prompt", "prompt_token_ids", "images")
IMAGE_FIELDS = ("span", "embeds_path")
IMAGE_EMBEDS_TENSOR = "embeds"  # the tensor name inside an image's safetensors file


class RequestError(ValueError):
    """One request is invalid; the message says which field and why (no location prefix)."""


@dataclass(frozen=True, slots=True)
class ImageSpan:
    """Prompt positions ``[begin, end)`` whose embeddings come from ``embeds_path`` or, through
    the Python API, directly from ``embeds``.

    The file is safetensors with one tensor named ``embeds``, shape (end - begin, hidden_size).
    """

    begin: int
    end: int
    embeds_path: Path | None
    embeds: torch.Tensor | None = field(default=None, compare=False)  # in-memory (API only)

    @property
    def num_tokens(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True, slots=True)
class Request:
    """A validated request, ready for the engine.

    Attributes:
        request_id: the input id as a string.
        prompt_token_ids: the prompt, 1 .. max_model_len - 1 ids, each < vocab_size.
        params: sampling parameters (defaults overridden by the line's own fields).
        index: 0-based line index in the input file (or index in ``generate``'s prompt list);
            with ``params.seed`` None, the seed is the engine seed + index, stable on resume.
        prompt: the text prompt, None if given as token ids.
        images: image spans, sorted and disjoint, inside the prompt.
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    index: int
    prompt: str | None = None
    images: tuple[ImageSpan, ...] = ()


@dataclass(frozen=True, slots=True)
class Rejection:
    """An input line that was not run. ``to_record()`` is what the results file gets."""

    request_id: str | None
    error: str
    line_no: int | None

    def to_record(self) -> dict[str, Any]:
        return {"id": self.request_id, "error": self.error, "line": self.line_no}

    def describe(self, source: str) -> str:
        """``"prompts.jsonl:3: id 'a': <error>"``, for stderr."""
        where = f"{source}:{self.line_no}: " if self.line_no is not None else f"{source}: "
        who = f"id {self.request_id!r}: " if self.request_id is not None else ""
        return f"{where}{who}{self.error}"


@dataclass(frozen=True)
class PromptLimits:
    """What a prompt is checked against.

    Attributes:
        tokenizer: encodes text prompts (None: only token-id prompts are accepted).
        vocab_size: token ids must be < this.
        max_model_len: prompt + output tokens; a prompt may have at most max_model_len - 1.
        image_token_id: the id every image-span position must carry (None: no images).
        base_dir: relative ``embeds_path`` values are resolved against it.
        default_params: sampling defaults that a line's own fields override.
    """

    tokenizer: Tokenizer | None
    vocab_size: int
    max_model_len: int
    image_token_id: int | None = None
    base_dir: Path = field(default_factory=Path)
    default_params: SamplingParams = field(default_factory=SamplingParams)


def validate_prompt(fields: Mapping[str, Any], limits: PromptLimits
                    ) -> tuple[tuple[int, ...], str | None, tuple[ImageSpan, ...]]:
    """``(prompt_token_ids, prompt_text, images)`` of ``fields`` (prompt / prompt_token_ids /
    images), or ``RequestError``."""
    has_text, has_ids = "prompt" in fields, "prompt_token_ids" in fields
    if has_text == has_ids:
        raise RequestError("give exactly one of 'prompt' (text) and 'prompt_token_ids' "
                           f"({'both' if has_text else 'neither'} given)")
    text = fields.get("prompt")
    if has_text:
        if not isinstance(text, str):
            raise RequestError(f"field 'prompt' must be a string, got {type(text).__name__}")
        if not text:
            raise RequestError("field 'prompt' is empty")
        if limits.tokenizer is None:
            raise RequestError("text prompts need a tokenizer; give 'prompt_token_ids'")
        ids = tuple(limits.tokenizer.encode(text))
        if not ids:
            raise RequestError("field 'prompt' encodes to no tokens")
    else:
        ids = _token_ids(fields["prompt_token_ids"], limits.vocab_size)
    if len(ids) >= limits.max_model_len:
        raise RequestError(f"prompt has {len(ids)} tokens; the max model length is "
                           f"{limits.max_model_len} (prompt plus at least one output token)")
    images = _images(fields.get("images"), ids, has_text, limits)
    return ids, (text if has_text else None), images


def _token_ids(value: Any, vocab_size: int) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise RequestError("field 'prompt_token_ids' must be a list of integers")
    if not value:
        raise RequestError("field 'prompt_token_ids' is empty")
    if set(map(type, value)) == {int} and min(value) >= 0 and max(value) < vocab_size:
        return tuple(value)  # plain ints in range, checked at C speed (a 4K prompt: ~0.1 ms)
    for i, t in enumerate(value):  # find the first bad id for the message
        if isinstance(t, bool) or not isinstance(t, int):
            raise RequestError(f"prompt_token_ids[{i}] = {t!r} is not an integer")
        if not 0 <= t < vocab_size:
            raise RequestError(f"prompt_token_ids[{i}] = {t} is outside the vocabulary "
                               f"[0, {vocab_size})")
    return tuple(value)


def _images(value: Any, ids: tuple[int, ...], has_text: bool,
            limits: PromptLimits) -> tuple[ImageSpan, ...]:
    if value is None:
        return ()
    if has_text:
        raise RequestError("field 'images' needs 'prompt_token_ids' (spans index token ids)")
    if limits.image_token_id is None:
        raise RequestError("field 'images' given but this model has no image token")
    if not isinstance(value, list | tuple):
        raise RequestError("field 'images' must be a list of {\"span\", \"embeds_path\"} objects")
    spans: list[ImageSpan] = []
    for k, image in enumerate(value):
        name = f"images[{k}]"
        in_memory = isinstance(image, Mapping) and set(image) == {"span", "embeds"}
        if not isinstance(image, Mapping) or (set(image) != set(IMAGE_FIELDS) and not in_memory):
            raise RequestError(f"{name} must be an object with exactly the fields "
                               f"{', '.join(IMAGE_FIELDS)} (or, from Python, span and embeds)")
        span, path = image["span"], image.get("embeds_path")
        if (not isinstance(span, list | tuple) or len(span) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in span)):
            raise RequestError(f"{name}.span must be [begin, end] (integers), got {span!r}")
        begin, end = span
        previous_end = spans[-1].end if spans else 0
        if not previous_end <= begin < end <= len(ids):
            raise RequestError(f"{name}.span [{begin}, {end}) must be non-empty, inside the "
                               f"{len(ids)}-token prompt, after the previous span (ends "
                               f"{previous_end})")
        off = [p for p in range(begin, end) if ids[p] != limits.image_token_id]
        if off:
            raise RequestError(f"{name}: prompt_token_ids[{off[0]}] = {ids[off[0]]} inside the "
                               f"span is not the image token {limits.image_token_id}")
        if in_memory:
            embeds = image["embeds"]
            if not isinstance(embeds, torch.Tensor) or embeds.dim() != 2 \
                    or embeds.shape[0] != end - begin:
                raise RequestError(f"{name}.embeds must be a ({end - begin}, hidden_size) tensor")
            spans.append(ImageSpan(begin, end, None, embeds))
            continue
        if not isinstance(path, str) or not path:
            raise RequestError(f"{name}.embeds_path must be a non-empty string")
        resolved = limits.base_dir / path
        if not resolved.is_file():
            raise RequestError(f"{name}.embeds_path: file {str(resolved)!r} not found")
        spans.append(ImageSpan(begin, end, resolved))
    return tuple(spans)


def load_image_embeds(image: ImageSpan, hidden_size: int) -> torch.Tensor:
    """The (image.num_tokens, hidden_size) embeddings of one span; RequestError if malformed."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if image.embeds is not None:
        if tuple(image.embeds.shape) != (image.num_tokens, hidden_size):
            raise RequestError(f"image span [{image.begin}, {image.end}): embeds must have shape "
                               f"{(image.num_tokens, hidden_size)}, got "
                               f"{tuple(image.embeds.shape)}")
        return image.embeds
    try:
        tensors = load_file(str(image.embeds_path))
    except (OSError, SafetensorError) as err:
        raise RequestError(f"{image.embeds_path}: not a readable safetensors file: {err}") from err
    embeds = tensors.get(IMAGE_EMBEDS_TENSOR)
    expected = (image.num_tokens, hidden_size)
    if embeds is None or tuple(embeds.shape) != expected:
        got = "no such tensor" if embeds is None else f"shape {tuple(embeds.shape)}"
        raise RequestError(f"{image.embeds_path}: tensor '{IMAGE_EMBEDS_TENSOR}' must have shape "
                           f"{expected}, got {got}")
    return embeds


def parse_request_line(line: str, line_no: int, limits: PromptLimits,
                       first_line_of: dict[str, int]) -> Request | Rejection:
    """One input line -> Request or Rejection. ``first_line_of`` (id -> line) is updated."""
    try:
        fields = json.loads(line)
    except ValueError as err:
        return Rejection(None, f"malformed JSON: {err}", line_no)
    if not isinstance(fields, dict):
        return Rejection(None, f"a request must be a JSON object, got {type(fields).__name__}",
                         line_no)
    raw_id = fields.get("id")
    if raw_id is None:
        return Rejection(None, "missing field 'id'", line_no)
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or raw_id == "":
        return Rejection(None, f"field 'id' must be a non-empty string or an integer, got "
                               f"{raw_id!r}", line_no)
    request_id = str(raw_id)
    if request_id in first_line_of:
        return Rejection(request_id, f"duplicate id (first on line {first_line_of[request_id]})",
                         line_no)
    first_line_of[request_id] = line_no
    try:
        return _request(fields, request_id, line_no, limits)
    except (RequestError, SamplingParamsError) as err:
        return Rejection(request_id, str(err), line_no)


def _request(fields: dict[str, Any], request_id: str, line_no: int,
             limits: PromptLimits) -> Request:
    sampling_names = SamplingParams.field_names()
    unknown = [k for k in fields if k not in REQUEST_FIELDS and k not in sampling_names]
    if unknown:
        raise RequestError(f"unknown field '{unknown[0]}' (allowed: {', '.join(REQUEST_FIELDS)}, "
                           f"and the sampling fields {', '.join(sampling_names)})")
    ids, text, images = validate_prompt(fields, limits)
    overrides = {k: v for k, v in fields.items() if k in sampling_names}
    params = SamplingParams.from_dict(overrides, base=limits.default_params)
    return Request(request_id, ids, params, index=line_no - 1, prompt=text, images=images)


def read_requests(lines: Iterable[str], limits: PromptLimits,
                  skip_ids: frozenset[str] | set[str] = frozenset()
                  ) -> Iterator[Request | Rejection]:
    """Requests and rejections of an input JSONL, in line order (line numbers from 1).

    Blank lines are ignored. Lines whose id is in ``skip_ids`` (already answered, on resume)
    yield nothing, whether valid or not.
    """
    first_line_of: dict[str, int] = {}
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        item = parse_request_line(line, line_no, limits, first_line_of)
        if item.request_id is not None and item.request_id in skip_ids:
            continue
        yield item


# ---------------------------------------------------------------------------------------------
# Results


class ResultsFileError(ValueError):
    """A results file cannot be resumed from; the message names the file and line."""


def result_record(output: RequestOutput) -> dict[str, Any]:
    """The JSON object written for one finished request (``docs/formats.md``)."""
    record: dict[str, Any] = {
        "id": output.request_id,
        "text": output.text,
        "token_ids": output.token_ids,
        "finish_reason": output.finish_reason,
        "num_prompt_tokens": output.num_prompt_tokens,
        "num_output_tokens": output.num_output_tokens,
    }
    if output.finish_reason == "error":
        record["error"] = output.error
    if output.logprobs is not None:
        record["logprobs"] = [{"token_id": lp.token_id, "logprob": _finite(lp.logprob),
                               "top": [[t, _finite(v)] for t, v in lp.top]}
                              for lp in output.logprobs]
    return record


def _finite(logprob: float) -> float | None:
    """-inf (a masked token) is written as null: JSON has no infinity."""
    return logprob if math.isfinite(logprob) else None


def _complete_lines(path: Path) -> tuple[list[bytes], int]:
    """The newline-terminated lines of ``path`` and the byte length they cover."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1  # 0 when there is no complete line
    return data[:end].splitlines(), end


def read_finished_ids(path: str | Path) -> set[str]:
    """Ids that ``path`` already answers (results and rejections); empty if it does not exist.

    A torn last line (no newline: the process died while writing it) is ignored here and
    removed by ``ResultsWriter(path, resume=True)``. Any other unreadable line is an error.
    """
    path = Path(path)
    if not path.exists():
        return set()
    lines, _ = _complete_lines(path)
    ids: set[str] = set()
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as err:
            raise ResultsFileError(f"{path}:{line_no}: not a JSON line ({err}); the results "
                                   f"file is damaged, resume from a copy without it") from err
        if not isinstance(record, dict) or "id" not in record:
            raise ResultsFileError(f"{path}:{line_no}: not a results record (no 'id')")
        if record["id"] is not None:
            ids.add(str(record["id"]))
    return ids


def truncate_torn_tail(path: str | Path) -> int:
    """Cut ``path`` after its last newline; returns the number of bytes removed."""
    path = Path(path)
    if not path.exists():
        return 0
    _, end = _complete_lines(path)
    removed = path.stat().st_size - end
    if removed:
        with open(path, "r+b") as f:
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
    return removed


class ResultsWriter:
    """Appends one JSON line per finished request, flushed and fsynced per line.

    ``resume=False`` starts an empty file; ``resume=True`` keeps the file, cutting a torn last
    line first (``num_torn_bytes`` says how many bytes were removed). Use as a context manager.
    """

    def __init__(self, path: str | Path, *, resume: bool = False) -> None:
        self.path = Path(path)
        self.num_torn_bytes = truncate_torn_tail(self.path) if resume else 0
        existed = self.path.exists()
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if resume else os.O_TRUNC)
        self._fd: int | None = os.open(self.path, flags, 0o644)
        if not existed:
            _fsync_dir(self.path.parent)

    def write_output(self, output: RequestOutput) -> None:
        self._write(result_record(output))

    def write_rejection(self, rejection: Rejection) -> None:
        self._write(rejection.to_record())

    def _write(self, record: dict[str, Any]) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path}: results writer is closed")
        data = (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory if str(directory) else ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
