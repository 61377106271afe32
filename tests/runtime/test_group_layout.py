"""The compressed groups of a prefill step (``runtime/model/group_layout.py``): hand-checked
layouts, and random batches against a per-sequence model of the same bookkeeping."""

import random

import numpy as np
import pytest

from deepinfer.runtime.model.group_layout import build_group_layout


def test_partials_empty_groups_and_open_rows_hand_checked():
    # ratio 2; source = [partial of seq 0, partial of seq 2, seq 0's 4 rows, seq 1's, seq 2's]
    lay = build_group_layout([4, 1, 1], [3, 0, 1], 2)
    assert lay.counts == [2, 0, 1] and lay.with_partial == [0, 2]
    assert lay.group_rows.tolist() == [0, 2, 3, 4, 1, 7]
    assert lay.positions.tolist() == [2, 4, 0]  # entries 1, 2 of seq 0; entry 0 of seq 2
    assert lay.open_rows == [(0, [(5, 6)]), (1, [(6, 7)]), (2, [])]  # seq 2's group closed


def test_whole_groups_from_source_row_zero_need_no_gather():
    lone = build_group_layout([5], [0], 2)
    assert lone.group_rows is None and lone.contiguous_rows == 4
    assert lone.open_rows == [(0, [(4, 5)])]
    with_partial = build_group_layout([3], [1], 2)  # [partial, row 0, row 1, row 2]
    assert with_partial.group_rows is None and with_partial.contiguous_rows == 4
    # two sequences with a partial each: seq 0's group is source rows 0, 2, seq 1's 1, 3
    two = build_group_layout([1, 1], [1, 1], 2)
    assert two.group_rows.tolist() == [0, 2, 1, 3]


@pytest.mark.parametrize("seed", range(20))
def test_random_batches_match_each_sequence_alone(seed):
    rng = random.Random(seed)
    ratio = rng.choice([2, 3, 4])
    seqs = rng.randint(1, 5)
    lens = [rng.randint(1, 3 * ratio) for _ in range(seqs)]
    starts = [rng.choice([0, rng.randint(0, 40)]) for _ in range(seqs)]
    lay = build_group_layout(lens, starts, ratio)
    # the source rows as labels: (b, position) of each row
    source = [(b, s - s % ratio + i) for b, s in enumerate(starts) for i in range(s % ratio)]
    source += [(b, s + i) for b, (s, n) in enumerate(zip(starts, lens, strict=True))
               for i in range(n)]
    rows = np.arange(lay.contiguous_rows) if lay.group_rows is None else lay.group_rows
    got = [source[r] for r in rows]
    want, positions, open_rows = [], [], {}
    for b, (s, n) in enumerate(zip(starts, lens, strict=True)):  # each sequence alone
        held = list(range(s - s % ratio, s + n))  # its open group's positions, then its rows
        done = len(held) // ratio * ratio
        want += [(b, p) for p in held[:done]]
        positions += held[:done:ratio]
        open_rows[b] = held[done:]
    assert got == want and lay.positions.tolist() == positions
    assert lay.counts == [(s % ratio + n) // ratio for s, n in zip(starts, lens, strict=True)]
    for b, ranges in lay.open_rows:
        assert [source[r] for a, z in ranges for r in range(a, z)] == \
            [(b, p) for p in open_rows[b]]
    changed = {b for b, s in enumerate(starts) if s % ratio or open_rows[b]}
    assert {b for b, _ in lay.open_rows} == changed
