"""bench/host_timeline.py: spans nest as the calls did, carry their own times, and the
self-time table subtracts exactly the direct children."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import host_timeline as ht  # noqa: E402

HERE = Path(__file__).resolve().parent


def _leaf():
    time.sleep(0.004)


def _mid():
    _leaf()
    _leaf()
    return sorted([3, 1, 2])


def _top():
    out = _mid()
    time.sleep(0.002)
    return out


def test_spans_nest_and_time_the_calls():
    result, spans = ht.record(_top, HERE)
    assert result == [1, 2, 3]
    names = [(s.depth, s.name.split(":")[-1]) for s in spans]
    assert names == [(0, "_top"), (1, "_mid"), (2, "_leaf"), (3, "sleep"), (2, "_leaf"),
                     (3, "sleep"), (2, "sorted"), (1, "sleep")]
    top, mid, leaf1, sleep1, leaf2 = spans[:5]
    assert sleep1.duration_ms >= 4.0 and leaf1.duration_ms >= sleep1.duration_ms
    assert leaf2.start_ms >= leaf1.start_ms + leaf1.duration_ms
    assert mid.duration_ms >= 8.0 and top.duration_ms >= mid.duration_ms + 2.0
    assert ht.first_start(spans, "_leaf", 2) == leaf2.start_ms
    assert ht.first_start(spans, "_leaf", 3) is None


def test_self_time_is_the_span_less_its_children():
    _, spans = ht.record(_top, HERE)
    table = ht.self_times(spans, until_ms=1e9)
    top, mid = spans[0], spans[1]
    assert table["sleep"][0] == 3
    want_top = top.duration_ms - mid.duration_ms - spans[-1].duration_ms
    assert abs(table[top.name][1] - want_top) < 1e-9
    # every span's time is counted once: the self times add up to the root's
    assert abs(sum(ms for _, ms in table.values()) - top.duration_ms) < 1e-6
    # a cut-off keeps only spans that start before it
    assert ht.self_times(spans, until_ms=spans[2].start_ms).keys() == {top.name, mid.name}
    text = ht.format_self_time(spans, 1e9, top=2)
    assert text.splitlines()[2].startswith("| `sleep` | 3 |")


def test_calls_outside_the_root_are_not_spans():
    _, spans = ht.record(_top, HERE / "elsewhere")
    assert spans == []
