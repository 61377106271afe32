"""Progress formatting (pure) and the rate-limited, TTY-only progress line."""

from __future__ import annotations

import io
import math

import pytest

from deepinfer.runtime.progress import (
    CLEAR_TO_END_OF_LINE,
    ProgressLine,
    estimate_remaining_s,
    format_duration,
    format_progress,
    format_summary,
)


@pytest.mark.parametrize(
    "seconds, text",
    [(0, "0s"), (42.4, "42s"), (59.6, "1m00s"), (187, "3m07s"), (7500, "2h05m"),
     (math.inf, "?"), (math.nan, "?"), (-1, "?")],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_estimate_remaining():
    assert estimate_remaining_s(0, 10, 5.0) == math.inf
    assert estimate_remaining_s(4, 10, 8.0) == pytest.approx(12.0)
    assert estimate_remaining_s(10, 10, 8.0) == 0.0


def test_format_progress_and_summary():
    assert format_progress(37, 100, 9749, 12.0) == (
        "37/100 requests (37%) | 812.4 tok/s | elapsed 12s | ETA 20s")
    assert format_progress(0, 100, 0, 0.0) == (
        "0/100 requests (0%) | 0.0 tok/s | elapsed 0s | ETA ?")
    assert format_progress(0, 0, 0, 1.0).startswith("0/0 requests (100%)")
    assert format_summary(100, 100, 3, 25600, 31.0) == (
        "done: 100/100 requests, 3 rejected, 25600 output tokens in 31s (825.8 tok/s)")


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_tty_redraws_at_most_n_times_per_second():
    clock, stream = FakeClock(), io.StringIO()
    line = ProgressLine(10, max_updates_per_s=2, stream=stream, is_tty=True, clock=clock)
    drawn = []
    for step in range(16):  # every 0.125 s for 2 s: drawn at 0.125, 0.625, 1.125, 1.625 s
        clock.now_s += 0.125
        drawn.append(line.update(step // 2, 50 * step))
    assert [i for i, d in enumerate(drawn) if d] == [0, 4, 8, 12]
    assert stream.getvalue().count("\r") == 4
    assert "\r6/10 requests (60%)" in stream.getvalue()
    assert "\r7/10 requests" not in stream.getvalue()  # the last updates were not drawn
    summary = line.finish(num_rejected=1)
    assert stream.getvalue().endswith(f"\r{CLEAR_TO_END_OF_LINE}deepinfer-run: {summary}\n")
    assert summary == "done: 7/10 requests, 1 rejected, 750 output tokens in 2s (375.0 tok/s)"


def test_not_a_tty_prints_only_the_summary():
    clock, stream = FakeClock(), io.StringIO()
    line = ProgressLine(3, stream=stream, is_tty=False, clock=clock)
    for i in range(3):
        clock.now_s += 1.0
        assert line.update(i + 1, 10 * (i + 1)) is False
    assert stream.getvalue() == ""
    line.finish()
    assert stream.getvalue() == (
        "deepinfer-run: done: 3/3 requests, 0 rejected, 30 output tokens in 3s (10.0 tok/s)\n")


def test_tty_detection_from_the_stream():
    assert ProgressLine(1, stream=io.StringIO()).is_tty is False
