"""A one-line progress display on stderr: requests done/total, output tokens/s, ETA.

On a TTY the line is redrawn in place (``\\r``) at most ``max_updates_per_s`` times per second;
elsewhere (a log file, CI) nothing is printed until :meth:`ProgressLine.finish`, which always
prints a one-line summary. The formatting functions are pure.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

CLEAR_TO_END_OF_LINE = "\x1b[K"


def format_duration(seconds: float) -> str:
    """``"42s"``, ``"3m07s"``, ``"2h05m"``; ``"?"`` for an unknown (inf/NaN/negative) duration."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    whole_s = int(round(seconds))
    if whole_s < 60:
        return f"{whole_s}s"
    if whole_s < 3600:
        return f"{whole_s // 60}m{whole_s % 60:02d}s"
    return f"{whole_s // 3600}h{whole_s % 3600 // 60:02d}m"


def estimate_remaining_s(num_done: int, num_total: int, elapsed_s: float) -> float:
    """Seconds left at the average rate so far; inf before the first request finishes."""
    if num_done >= num_total:
        return 0.0
    if num_done <= 0 or elapsed_s <= 0:
        return math.inf
    return elapsed_s * (num_total - num_done) / num_done


def format_progress(num_done: int, num_total: int, num_output_tokens: int,
                    elapsed_s: float) -> str:
    """``"37/100 requests (37%) | 812.4 tok/s | elapsed 12s | ETA 20s"``."""
    percent = 100 * num_done // num_total if num_total else 100
    tokens_per_s = num_output_tokens / elapsed_s if elapsed_s > 0 else 0.0
    eta_s = estimate_remaining_s(num_done, num_total, elapsed_s)
    return (f"{num_done}/{num_total} requests ({percent}%) | {tokens_per_s:.1f} tok/s | "
            f"elapsed {format_duration(elapsed_s)} | ETA {format_duration(eta_s)}")


def format_summary(num_done: int, num_total: int, num_rejected: int, num_output_tokens: int,
                   elapsed_s: float) -> str:
    """``"done: 100/100 requests, 3 rejected, 25600 output tokens in 31s (825.8 tok/s)"``."""
    tokens_per_s = num_output_tokens / elapsed_s if elapsed_s > 0 else 0.0
    return (f"done: {num_done}/{num_total} requests, {num_rejected} rejected, "
            f"{num_output_tokens} output tokens in {format_duration(elapsed_s)} "
            f"({tokens_per_s:.1f} tok/s)")


class ProgressLine:
    """Rate-limited progress on ``stream`` (stderr by default).

    Args:
        num_total: requests in the job (rejected lines excluded).
        max_updates_per_s: redraws per second at most (on a TTY).
        stream: where to write; ``is_tty`` defaults to ``stream.isatty()``.
        clock: seconds, monotonic (injectable for tests).
    """

    def __init__(self, num_total: int, *, max_updates_per_s: float = 4.0,
                 stream: TextIO | None = None, is_tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.num_total = num_total
        self.stream = stream if stream is not None else sys.stderr
        self.is_tty = self.stream.isatty() if is_tty is None else is_tty
        self._min_interval_s = 1.0 / max_updates_per_s
        self._clock = clock
        self._start_s = clock()
        self._last_draw_s = -math.inf
        self.num_done = 0
        self.num_output_tokens = 0

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._start_s

    def update(self, num_done: int, num_output_tokens: int) -> bool:
        """Record totals so far; redraw if on a TTY and the rate allows. Returns whether drawn."""
        self.num_done, self.num_output_tokens = num_done, num_output_tokens
        now_s = self._clock()
        if not self.is_tty or now_s - self._last_draw_s < self._min_interval_s:
            return False
        self._last_draw_s = now_s
        line = format_progress(num_done, self.num_total, num_output_tokens, now_s - self._start_s)
        self.stream.write(f"\r{line}{CLEAR_TO_END_OF_LINE}")
        self.stream.flush()
        return True

    def finish(self, num_rejected: int = 0) -> str:
        """Print (and return) the summary line, ending the progress line on a TTY."""
        summary = format_summary(self.num_done, self.num_total, num_rejected,
                                 self.num_output_tokens, self.elapsed_s)
        prefix = f"\r{CLEAR_TO_END_OF_LINE}" if self.is_tty else ""
        self.stream.write(f"{prefix}deepinfer-run: {summary}\n")
        self.stream.flush()
        return summary
