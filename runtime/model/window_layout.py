"""Where the sliding-window keys of a prefill batch lie: one layout per forward, every layer's.

The attention of a prefill step runs once over all of its sequences
(``Attention._prefill_attention``): one key tensor, one list of key rows per query. Its window
part is

    keys = [cached rows of every continuing sequence, in batch order] + [the step's kv rows]

so a query of sequence b at position p lists the keys of positions p - W + 1 .. p:

    q <  first_b            -> -1 (before the sequence, or older than the ring holds)
    q <  start_b            -> q + prev_shift_b   (a cached row: prev_off_b + q - first_b)
    otherwise               -> q + row_shift_b    (a row of this step: P + row0_b + q - start_b)

with start_b the sequence's first new position, first_b = max(0, start_b - W + 1), P the cached
rows of all sequences and row0_b the sequence's first flat row. The per-row constants are built
on the host (numpy, one pass over the sequences) and copied to the device once per forward;
before, each sequence's keys, ring writes and attention launch cost ~45 launches per sequence and
layer (session 22: 64 prompts of 128 tokens prefilled in ~1.7 s against 0.16 s for one 8K
prompt, bench/decode.py's engine loop in round 127a).

The ring writes (the last min(S_b, W) rows of each sequence, Q8_32 records at ring slot p % W)
are ``tails``: a sequence's run of positions covers at most two contiguous ring ranges. When
every sequence's ring lives in one pool (the paged cache: ``(slots, layers, W, bytes)``, each
sequence in its state slot), ``pool_rows`` addresses the cached rows read and the tail rows
written directly, so each layer reads and writes every sequence's ring in one op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from deepinfer.runtime.device import to_device


@dataclass
class WindowLayout:
    """The window part of one prefill forward (see the module docstring).

    Attributes:
        shifts: (4, N) int64 on the device; rows: first_b, start_b, prev_shift_b, row_shift_b
            of each flat row's sequence.
        prev: (b, first_b, start_b) of each sequence with cached rows (start_b > 0), in batch
            order; their rows start the key tensor in this order.
        tail_rows: (T,) int64 on the device, the flat rows whose records go to the rings.
        tails: (b, first position, count) per sequence, in ``tail_rows`` order.
        pool_rows: when the rings share one pool, (state slot, ring slot) int64 device tensors
            of the cached rows (``prev`` order, positions ascending) and of the tail rows
            (``tail_rows`` order): ``((prev_slot, prev_ring), (tail_slot, tail_ring))``.
    """

    shifts: torch.Tensor
    prev: list[tuple[int, int, int]]
    tail_rows: torch.Tensor
    tails: list[tuple[int, int, int]]
    pool_rows: tuple[tuple[torch.Tensor, torch.Tensor],
                     tuple[torch.Tensor, torch.Tensor]] | None = None


def build_window_layout(seq_lens: list[int], start_positions: list[int], window: int,
                        device: torch.device | str,
                        state_slots: list[int] | None = None) -> WindowLayout:
    """The layout of sequences with ``seq_lens`` new tokens from ``start_positions`` (host
    lists, batch order) for a sliding window of ``window`` positions; ``state_slots``: each
    sequence's slot when their rings share one pool (``pool_rows``)."""
    lens = np.asarray(seq_lens, dtype=np.int64)
    starts = np.asarray(start_positions, dtype=np.int64)
    row0 = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    first = np.maximum(0, starts - window + 1)
    cached = starts - first
    prev_off = np.concatenate([[0], np.cumsum(cached)[:-1]]).astype(np.int64)
    num_prev = int(cached.sum())
    per_seq = np.stack([first, starts, prev_off - first, num_prev + row0 - starts])
    count = np.minimum(lens, window)
    tail_rows = np.concatenate([np.arange(r + n - c, r + n, dtype=np.int64)
                                for r, n, c in zip(row0, lens, count, strict=True)])
    tails = [(b, int(s + n - c), int(c))
             for b, (s, n, c) in enumerate(zip(starts, lens, count, strict=True))]
    prev = [(b, int(f), int(s)) for b, (f, s) in enumerate(zip(first, starts, strict=True))
            if s > f]
    host = [np.repeat(per_seq, lens, axis=1).ravel(), tail_rows]
    if state_slots is not None:  # (state slot, ring slot) of every cached and every tail row
        slots = np.asarray(state_slots, dtype=np.int64)
        prev_pos = [np.arange(f, s, dtype=np.int64) for _, f, s in prev]
        tail_pos = [np.arange(f, f + c, dtype=np.int64) for _, f, c in tails]
        host += [np.repeat(slots[[b for b, _, _ in prev]], [s - f for _, f, s in prev]),
                 np.concatenate(prev_pos) % window if prev_pos else np.zeros(0, np.int64),
                 np.repeat(slots, count), np.concatenate(tail_pos) % window]
    sizes = [a.size for a in host]
    parts = to_device(np.concatenate(host), device).split(sizes)  # one copy
    pool_rows = None
    if state_slots is not None:
        pool_rows = ((parts[2], parts[3]), (parts[4], parts[5]))
    return WindowLayout(parts[0].view(4, -1), prev, parts[1], tails, pool_rows)


def key_indices(layout: WindowLayout, positions: torch.Tensor, window: int) -> torch.Tensor:
    """(N, W) int64 key rows of each query's window ``p - W + 1 .. p`` (ascending), -1 where
    there is none; positions (N,) int64 on the layout's device."""
    first, start, prev_shift, row_shift = (t[:, None] for t in layout.shifts)
    q = positions[:, None] - (window - 1) + torch.arange(window, device=positions.device)
    keys = torch.where(q < start, q + prev_shift, q + row_shift)
    return torch.where(q < first, torch.full_like(q, -1), keys)


def ring_ranges(first: int, count: int, window: int) -> list[tuple[int, int, int]]:
    """Positions first .. first + count - 1 (count <= window) of a ring of ``window`` slots as
    (ring slot, offset into the run, length) pieces: at most two contiguous ranges."""
    slot = first % window
    head = min(count, window - slot)
    pieces = [(slot, 0, head)]
    if head < count:
        pieces.append((0, head, count - head))
    return pieces
