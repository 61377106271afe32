"""The pure helpers of bench/bench_common.py over GPU activity intervals (no GPU needed)."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "bench_common.py"
_spec = importlib.util.spec_from_file_location("bench_common", _PATH)
bc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bc)


def test_busy_is_the_union_of_overlapping_intervals():
    assert bc.busy_us([(0, 10, "a"), (5, 12, "b"), (20, 25, "c"), (21, 22, "d")]) == 17


def test_idle_gap_is_the_idle_time_between_steps_only():
    # step 0: kernels 0..10 and 12..20, host range ends at 30 (after its results came back)
    # between: an input copy 40..42 the host queued before launching step 1
    # step 1: launched at host 45, kernels 50..60 and 61..70; step 2 launched at 80: 100..110
    ivs = [(0, 10, "k"), (12, 20, "k"), (40, 42, "copy"), (50, 60, "k"), (61, 70, "k"),
           (100, 110, "k")]
    windows = [(-1, 30), (45, 75), (80, 115)]
    assert bc.idle_gaps_us(ivs, windows) == [(40 - 20) + (50 - 42), 100 - 70]
    assert bc.idle_gaps_us(ivs, windows, [False, True]) == [30]


def test_idle_gap_is_zero_when_the_next_step_was_queued_early():
    ivs = [(0, 10, "k"), (10, 20, "k")]
    assert bc.idle_gaps_us(ivs, [(-5, 25), (5, 30)]) == [0.0]


def test_kernel_table_groups_by_name_largest_first():
    rows = bc.kernel_table([(0, 4, "a"), (4, 5, "b"), (5, 9, "a")], top=5)
    assert [(r["name"], r["calls"], r["total_us"]) for r in rows] == [("a", 2, 8), ("b", 1, 1)]
    assert rows[0]["share"] == pytest.approx(8 / 9)


def test_gap_summary_median_and_p90():
    s = bc.gap_summary([float(x) for x in range(1, 11)])
    assert s["count"] == 10 and s["median_us"] == 5.5 and s["p90_us"] == 9.0
