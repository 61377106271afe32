"""The host's own timeline of one call: each call into a function under a source root (and each
Triton launch or C builtin such a function makes), with its start and inclusive time.

    result, spans = host_timeline.record(lambda: llm.generate(...), root=package_root)
    print(host_timeline.format_spans(spans, until_ms=12.0, min_us=40.0))
    print(host_timeline.format_self_time(spans, until_ms=12.0))

Where a lone prompt's first milliseconds go on the host while the GPU waits (``bench/prefill.py
--host-timeline-held``: the GPU held by a spin first, so nothing on the host waits for it and
every span is the host's own work). ``sys.setprofile`` sees the calling thread only (the lone
prompt's step enqueues inline); its hook costs ~1 µs a Python call, so the spans are inflated
about evenly — read them as shares, not as absolute costs.

A span: (start_ms, duration_ms, depth, name). ``name`` is ``path:function`` relative to the
root for our functions, ``launch <kernel>`` for a Triton JIT launch, ``torch <op>`` (or the
builtin's qualified name) for a C function called from our frames.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Span:
    start_ms: float
    duration_ms: float
    depth: int
    name: str


def _builtin_name(fn: Any) -> str:
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    module = getattr(fn, "__module__", None) or ""
    if module.startswith("torch") or "Tensor" in qual or "TensorBase" in qual:
        return f"torch {qual}"
    return qual


def record(fn: Callable[[], Any], root: Path) -> tuple[Any, list[Span]]:
    """Run ``fn`` under a profile hook -> (its result, spans in start order). Spans: every
    Python call whose code lies under ``root``; every call such a frame makes into a Triton
    JIT launch (named by its kernel) and every C function it calls (torch ops included).
    Calls outside ``root`` made by other outside code are not spans (their time is in the
    caller's)."""
    prefix = str(root)  # as the code objects name their files (not resolved)
    t0 = time.perf_counter()
    spans: list[Span] = []
    # per open frame: (the span's index, or -1 for a frame we only pass through)
    open_frames: dict[int, int] = {}
    c_stack: list[int] = []  # open C-call spans
    depth = [0]
    ours_cache: dict[str, bool] = {}

    def ours(filename: str) -> bool:
        hit = ours_cache.get(filename)
        if hit is None:
            hit = ours_cache[filename] = filename.startswith(prefix)
        return hit

    def hook(frame, event: str, arg: Any) -> None:
        now = (time.perf_counter() - t0) * 1e3
        if event == "call":
            code = frame.f_code
            name = None
            if ours(code.co_filename):
                rel = code.co_filename[len(prefix):].lstrip("/")
                name = f"{rel}:{code.co_qualname}"
            elif frame.f_back is not None and ours(frame.f_back.f_code.co_filename):
                if code.co_filename.endswith("runtime/jit.py") and code.co_name == "<lambda>":
                    jit = frame.f_locals.get("self")
                    name = f"launch {getattr(jit, '__name__', '?')}"
                else:
                    name = f"{Path(code.co_filename).name}:{code.co_qualname}"
            if name is not None:
                open_frames[id(frame)] = len(spans)
                spans.append(Span(now, -1.0, depth[0], name))
                depth[0] += 1
        elif event == "return":
            i = open_frames.pop(id(frame), None)
            if i is not None:
                spans[i].duration_ms = now - spans[i].start_ms
                depth[0] -= 1
        elif event == "c_call":
            if ours(frame.f_code.co_filename):
                c_stack.append(len(spans))
                spans.append(Span(now, -1.0, depth[0], _builtin_name(arg)))
                depth[0] += 1
        elif event in ("c_return", "c_exception"):
            if c_stack and ours(frame.f_code.co_filename):
                i = c_stack.pop()
                spans[i].duration_ms = now - spans[i].start_ms
                depth[0] -= 1

    sys.setprofile(hook)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    end = (time.perf_counter() - t0) * 1e3
    for s in spans:  # still open when fn returned (an exception unwound them)
        if s.duration_ms < 0:
            s.duration_ms = end - s.start_ms
    return result, spans


def first_start(spans: list[Span], name_part: str, nth: int = 1) -> float | None:
    """The start (ms) of the ``nth`` span whose name contains ``name_part``, or None."""
    seen = 0
    for s in spans:
        if name_part in s.name:
            seen += 1
            if seen == nth:
                return s.start_ms
    return None


def format_spans(spans: list[Span], until_ms: float, min_us: float = 40.0,
                 max_lines: int = 800) -> str:
    """The spans starting before ``until_ms`` that last at least ``min_us``, indented by depth:
    ``start ms  duration µs  name``."""
    lines = [f"{'start ms':>9}  {'µs':>8}  call (inclusive)"]
    for s in spans:
        if s.start_ms >= until_ms or len(lines) > max_lines:
            break
        if s.duration_ms * 1e3 >= min_us:
            lines.append(f"{s.start_ms:9.3f}  {s.duration_ms * 1e3:8.1f}  "
                         f"{'  ' * s.depth}{s.name}")
    return "\n".join(lines)


def self_times(spans: list[Span], until_ms: float) -> dict[str, tuple[int, float]]:
    """Per name over the spans starting before ``until_ms``: (calls, self ms), self = the
    span's time less its direct children's."""
    child_ms = [0.0] * len(spans)
    stack: list[int] = []  # indices of the enclosing spans, by depth
    for i, s in enumerate(spans):
        while stack and spans[stack[-1]].depth >= s.depth:
            stack.pop()
        if stack:
            child_ms[stack[-1]] += s.duration_ms
        stack.append(i)
    out: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for i, s in enumerate(spans):
        if s.start_ms < until_ms:
            out[s.name][0] += 1
            out[s.name][1] += max(s.duration_ms - child_ms[i], 0.0)
    return {k: (v[0], v[1]) for k, v in out.items()}


def format_self_time(spans: list[Span], until_ms: float, top: int = 40) -> str:
    """The ``top`` names by self time before ``until_ms``, as a table."""
    rows = sorted(self_times(spans, until_ms).items(), key=lambda kv: -kv[1][1])[:top]
    lines = ["| call | calls | self µs |", "|---|---:|---:|"]
    lines += [f"| `{name}` | {n} | {ms * 1e3:.1f} |" for name, (n, ms) in rows]
    return "\n".join(lines)
