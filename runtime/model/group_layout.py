"""Where the compressed groups of a prefill step come from: one layout per forward and ratio.

A KV source of ratio r > 1 pools each run of r consecutive tokens into one compressed entry
(``Compressor``). A sequence b starting the step at position s_b holds p_b = s_b % r tokens of
its open group from earlier steps (the cache's partial state) and brings n_b new rows, so the
step completes G_b = (p_b + n_b) // r groups and leaves L_b = p_b + n_b - G_b r tokens open.

Every sequence's groups are pooled at once over one source tensor

    source = [partial rows of every sequence with p_b > 0, in batch order] + [the step's rows]

``group_rows`` lists, group after group, the r source rows of each complete group (batch
order); ``open_rows`` the source rows each sequence leaves in its open group. The lists are
built on the host (numpy, one pass over the sequences); the group rows and the entries' RoPE
positions cross to the device in one copy. Before, each sequence's groups cost ~20 launches
per KV-source layer (session 23).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class GroupLayout:
    """The groups of one prefill step at one ratio (see the module docstring).

    Attributes:
        counts: G_b, the entries each sequence completes (batch order).
        with_partial: the sequences with p_b > 0, whose partial rows open ``source``.
        group_rows: (sum G_b * r,) int64 source rows of the complete groups, or None when they
            are source rows 0 .. ``contiguous_rows`` - 1 in order (no gather needed).
        contiguous_rows: how many source rows form the groups when ``group_rows`` is None.
        positions: (sum G_b,) int64 RoPE position of each new entry (entry id * r).
        open_rows: per sequence whose open group changes, (b, [(start, stop) source ranges]).
    """

    counts: list[int]
    with_partial: list[int]
    group_rows: np.ndarray | None
    contiguous_rows: int
    positions: np.ndarray
    open_rows: list[tuple[int, list[tuple[int, int]]]]


def build_group_layout(seq_lens: list[int], start_positions: list[int],
                       ratio: int) -> GroupLayout:
    """The layout of sequences with ``seq_lens`` new rows from ``start_positions`` (host lists,
    batch order, their rows consecutive in the step) at compress ratio ``ratio`` > 1."""
    partial = [s % ratio for s in start_positions]
    with_partial = [b for b, p in enumerate(partial) if p]
    num_partial = sum(partial)
    counts, rows, positions, open_rows = [], [], [], []
    part_off, row0 = 0, num_partial
    for b, (n, s, p) in enumerate(zip(seq_lens, start_positions, partial, strict=True)):
        groups = (p + n) // ratio
        counts.append(groups)
        if groups:
            rows.append(np.arange(part_off, part_off + p, dtype=np.int64))
            rows.append(np.arange(row0, row0 + groups * ratio - p, dtype=np.int64))
            positions.append((s // ratio + np.arange(groups, dtype=np.int64)) * ratio)
            left = [(row0 + groups * ratio - p, row0 + n)]
        else:
            left = [(part_off, part_off + p), (row0, row0 + n)]
        left = [(a, z) for a, z in left if z > a]
        if left or p:
            open_rows.append((b, left))
        part_off += p
        row0 += n
    flat = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    # source rows 0, 1, 2, ... need no gather (a lone prompt, or whole groups without partials)
    contiguous = bool((flat == np.arange(flat.size)).all())
    return GroupLayout(counts, with_partial, None if contiguous else flat,
                       int(flat.size) if contiguous else 0,
                       np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64),
                       open_rows)
