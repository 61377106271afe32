"""Per-row index lists of a batched decode step into the flattened cache pools (model-spec §3).

A decode step has one new token per sequence (N rows, row i at position ``p_i`` with state slot
``slot_i`` and block table ``table_i``). Attention of row i reads, in this order:

* window records of positions ``q`` in ``[p - W + 1, p]`` (ascending): row
  ``(slot * L + layer) * W + q % W`` of ``CachePool.flat_window()`` (``L`` backbone layers),
  -1 where ``q < 0``;
* compressed records of its selected entries ``e`` (ascending, -1 padded): row
  ``table[e // per_block] * per_block + e % per_block`` of ``CachePool.flat_entries(s)``.

Both lists have fixed widths (W and ``index_topk``), so their shapes depend on N only. The
indexer of an index-source layer scores row i's visible index keys ``e < (p + 1) // ratio``
in place in ``CachePool.flat_index_keys(s)`` through the same block mapping (the
``index_scores_paged`` op) into (N, T) rows, T = :meth:`DecodeRows.key_width` (static under a
CUDA graph). Nothing here reads a device value back to the host: a decode forward over
:class:`DecodeRows` can be captured in a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F

from deepinfer.kernels import formats
from deepinfer.kernels.registry import REFERENCE, KernelSet
from deepinfer.runtime.cache_pool import CachePool, PagedSequenceCache
from deepinfer.runtime.device import to_device
from deepinfer.runtime.model.batch import ForwardBatch

RECORDS_OP = "sparse_attention_sink_records"


def window_rows(slots: torch.Tensor, positions: torch.Tensor, num_layers: int, window: int,
                layer: int) -> torch.Tensor:
    """(N,) int64 state slots and positions -> (N, W) int64 rows of the flattened window pool
    for positions ``p - W + 1 .. p`` (ascending), -1 for negative positions."""
    q = positions[:, None] - (window - 1) + torch.arange(window, device=positions.device)
    rows = (slots[:, None] * num_layers + layer) * window + q.remainder(window)
    return torch.where(q >= 0, rows, torch.full_like(rows, -1))


def compressed_rows(block_tables: torch.Tensor, entry_ids: torch.Tensor,
                    entries_per_block: int) -> torch.Tensor:
    """(N, max_blocks) int64 block tables, (N, K) int64 entry ids (-1 = none) -> (N, K) int64
    rows of the flattened entry pool of one KV source, -1 kept."""
    e = entry_ids.clamp(min=0)
    blocks = block_tables.gather(1, torch.div(e, entries_per_block, rounding_mode="floor"))
    # 7 launches (a decode step runs this per layer): the add scales, the fill is in place
    rows = torch.add(e.remainder(entries_per_block), blocks, alpha=entries_per_block)
    return rows.masked_fill_(entry_ids < 0, -1)


class CompressGroups(NamedTuple):
    """A decode step's rows against one compress ratio r (each (N,) int64 or bool): whether
    row i's position p completes its group (``(p + 1) % r == 0``), the group ``p // r``, its
    first position, and for r > 1 (None for r = 1) the partial row ``min(p % r, r - 2)`` of
    its slot and the state slot a partial write goes to (slot 0, the sentinel, for a
    completing row)."""

    complete: torch.Tensor
    group: torch.Tensor
    group_pos: torch.Tensor
    partial_row: torch.Tensor | None
    keep_slot: torch.Tensor | None


@dataclass
class DecodeRows:
    """One decode step's inputs and pool addressing: everything a decode forward reads.

    Device tensors (N rows, the pool's device): ``input_ids`` (N,) int64, ``positions`` (N,)
    int64, ``slots`` (N,) int64 state slots, ``block_tables`` (N, max_blocks) int64 (padded
    with the sentinel block 0). ``max_position`` is a host int that fixes the width of the
    indexer's key lists, ``(max_position + 1) // ratio``: the step's largest position when run
    eagerly, ``max_model_len - 1`` under a CUDA graph (static shapes).

    Padding rows of a graph bucket use slot 0, block 0 and position 0: the pools' sentinels,
    which no sequence owns, so whatever a padding row writes is never read by a real row.
    """

    pool: CachePool
    input_ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    block_tables: torch.Tensor
    max_position: int

    image_mask = None  # decode rows never carry image tokens (the MoE router's mask)
    # (L, N, W) window rows of every layer, built on the first ``window`` call of the step
    _window_all: torch.Tensor | None = field(default=None, init=False, repr=False)
    # compress ratio -> its CompressGroups, built on the first ``groups`` call of the step
    _groups: dict[int, CompressGroups] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def build(cls, batch: ForwardBatch) -> DecodeRows | None:
        """The rows of ``batch`` if it is a decode step over one pool (every sequence one new
        token, every cache a :class:`PagedSequenceCache` of the same pool, no image token),
        else None."""
        caches = batch.caches
        if not caches or any(n != 1 for n in batch.seq_lens) or batch.image_mask is not None:
            return None
        if not all(isinstance(c, PagedSequenceCache) for c in caches):
            return None
        pool = caches[0].pool
        if any(c.pool is not pool for c in caches):
            return None
        width = max(c.block_table.shape[0] for c in caches)
        tables = torch.stack([F.pad(c.block_table, (0, width - c.block_table.shape[0]))
                              for c in caches])
        slots = to_device(torch.tensor([c.slot for c in caches], dtype=torch.int64),
                          pool.device)  # pinned, asynchronous: no host sync
        return cls(pool, batch.input_ids, batch.positions, slots, tables,
                   max(batch.start_positions))

    def window(self, layer: int) -> torch.Tensor:
        """(N, W) rows of ``pool.flat_window()`` for ``layer``; the last column is row i's own
        new position. Layer l's rows are layer 0's plus l * W where valid, so the step builds
        all layers' once (3 launches, not ~11 per layer) and hands out views."""
        spec = self.pool.spec
        num_layers, w = spec.num_hidden_layers, spec.sliding_window
        if self._window_all is None:
            base = window_rows(self.slots, self.positions, num_layers, w, 0)
            offsets = torch.arange(num_layers, device=base.device) * w
            self._window_all = torch.where(base >= 0, base + offsets[:, None, None], base)
        return self._window_all[layer]

    def groups(self, ratio: int) -> CompressGroups:
        """Where each row's token falls in its compress group of ``ratio``, built once per
        step and ratio (every compressing layer of that ratio shares it): 1 launch for ratio
        1, 7 for the others."""
        cached = self._groups.get(ratio)
        if cached is None:
            pos = self.positions
            if ratio == 1:  # every token completes its own group; no partial rows
                cached = CompressGroups(torch.ones_like(pos, dtype=torch.bool), pos, pos,
                                        None, None)
            else:
                group = torch.div(pos, ratio, rounding_mode="floor")
                rem = pos - group * ratio
                complete = rem == ratio - 1
                cached = CompressGroups(complete, group, pos - rem, rem.clamp(max=ratio - 2),
                                        torch.where(complete, 0, self.slots))
            self._groups[ratio] = cached
        return cached

    def num_visible(self, source_layer: int) -> torch.Tensor:
        """(N,) int64 entries of ``source_layer`` row i may see: ``(p_i + 1) // ratio``."""
        ratio = self.pool.ratio[source_layer]
        return torch.div(self.positions + 1, ratio, rounding_mode="floor")

    def key_width(self, source_layer: int) -> int:
        """Host int: the width of the indexer's (N, T) score rows of ``source_layer``."""
        return (self.max_position + 1) // self.pool.ratio[source_layer]

    def compressed(self, source_layer: int, entry_ids: torch.Tensor) -> torch.Tensor:
        """(N, K) entry ids of ``source_layer`` -> (N, K) rows of its flattened entry pool."""
        return compressed_rows(self.block_tables, entry_ids,
                               self.pool.entries_per_block[source_layer])


def attend_records(k: KernelSet, q: torch.Tensor, window: torch.Tensor,
                   window_idx: torch.Tensor, entries: torch.Tensor | None,
                   entry_idx: torch.Tensor | None, sink: torch.Tensor,
                   softmax_scale: float) -> torch.Tensor:
    """One softmax over listed window records, listed compressed records and the sink.

    Args: q (N, H, D); window uint8 (R, D + D/32) and window_idx (N, W) (-1 ignored; the last
    column must be valid); entries uint8 (E, D/2 + D/16) or None and entry_idx (N, K) or None.
    Returns (N, H, D) in q's dtype.

    A non-reference ``sparse_attention_sink_records`` (the Triton kernel) reads the pools in
    place. Otherwise (the reference registers no records op of its own) this composes it: the
    listed records only (same rows, same order as the per-sequence path, hence the same bits)
    are dequantized to bf16 and handed to ``sparse_attention_sink`` with the lists offset into
    them. Invalid slots gather the row's own newest window record, so the row the op reads for
    a -1 (its clamp to row 0) is one the sequence wrote, never pool garbage (0 * NaN = NaN).
    """
    if k.backend_of(RECORDS_OP) != REFERENCE:
        return k.sparse_attention_sink_records(q, window, window_idx, entries, entry_idx, sink,
                                               softmax_scale)
    d = q.shape[-1]
    records, indices = _compact(window, window_idx, window_idx[:, -1])
    keys = formats.unpack_window_kv(records, d, torch.bfloat16)
    if entries is not None and entry_idx is not None:
        records, local = _compact(entries, entry_idx, None)
        offset = keys.shape[0]
        keys = torch.cat([keys, formats.unpack_compressed_kv(records, d, torch.bfloat16)])
        indices = torch.cat([indices, torch.where(local >= 0, local + offset, local)], dim=1)
    return k.sparse_attention_sink(q, keys, indices, sink, softmax_scale)


def _compact(records: torch.Tensor, idx: torch.Tensor,
             fallback: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """records (R, B), idx (N, K) -> the listed records (N*K, B) and (N, K) indices into them
    (-1 kept); invalid slots gather ``fallback`` (N,) rows, or row 0 when None."""
    valid = idx >= 0
    fill = torch.zeros_like(idx) if fallback is None else fallback[:, None].expand_as(idx)
    gathered = records[torch.where(valid, idx, fill)].flatten(0, 1)
    local = torch.arange(idx.numel(), device=idx.device).view_as(idx)
    return gathered, torch.where(valid, local, torch.full_like(local, -1))
