"""Attention of one V4.1 layer (model-spec §2.4, §2.7, §3): sliding window + compressed sparse.

Per token: low-rank queries with RoPE; one shared K=V latent per token written FP8 into the
window ring; on ratio > 0 layers, the selected compressed entries of the layer's KV source; one
softmax over window rows, selected rows and the sink; inverse RoPE on the output; grouped
low-rank output projection.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from deepinfer.artifacts.model_spec import LayerSpec, ModelSpec
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.device import to_device
from deepinfer.runtime.model import indexer as indexer_mod
from deepinfer.runtime.model import window_layout
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.cache import (
    CacheView,
    append_entries_all,
    entries_all,
)
from deepinfer.runtime.model.compressor import Compressor
from deepinfer.runtime.model.decode_rows import DecodeRows, attend_records
from deepinfer.runtime.model.indexer import Indexer
from deepinfer.runtime.model.params import Linear, Norm, f32_param
from deepinfer.runtime.model.rope_tables import layer_inv_freq


class Published:
    """What index sources publish within one forward, per layer and sequence: top-k entry ids
    (S, k) and the candidate mask (S, T) of the candidate source; in a decode step (and a
    prefill step's short selections), per layer for all N rows at once. In a prefill step
    also each KV source's compressed entries of all sequences, unpacked once (every later layer
    of that source reads the same ones)."""

    def __init__(self) -> None:
        self.topk: dict[tuple[int, int], torch.Tensor] = {}
        self.candidates: dict[tuple[int, int], torch.Tensor] = {}
        # all N rows at once: decode step, layer -> (N, index_topk) and (N, T); prefill step,
        # when every sequence took every visible entry (Attention._short_selection), layer ->
        # (N, max T_b) both
        self.topk_rows: dict[int, torch.Tensor] = {}
        self.candidate_rows: dict[int, torch.Tensor] = {}
        # prefill: KV source -> (entries (sum T_b, Dh) bf16 in batch order, T_b per sequence)
        self.entries: dict[int, tuple[torch.Tensor, list[int]]] = {}
        # (KV source, index source), or None for a prefill's window-only layers -> the
        # attention's row lists: a prefill's int32 (N, W + k) (the window layout's, then the
        # picks' entry rows); a decode step's (N, index_topk) rows of the flattened entry pool
        self.attention_rows: dict[tuple[int, int] | None, torch.Tensor] = {}
        # a prefill's rows with picks -> (N,) int32: each row's entries up to its last valid one
        # (the picks end in -1 padding, which the attention then does not read)
        self.attention_counts: dict[tuple[int, int] | None, torch.Tensor | None] = {}


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, layer: LayerSpec):
        super().__init__()
        self.spec, self.layer = spec, layer
        d, h, dh = spec.hidden_size, spec.num_attention_heads, spec.head_dim
        self.n_heads, self.head_dim = h, dh
        self.wq_a = Linear(d, spec.q_lora_rank, quant_act=True)
        self.q_norm = Norm(spec.q_lora_rank)
        self.wq_b = Linear(spec.q_lora_rank, h * dh, quant_act=True)
        self.wkv = Linear(d, dh, quant_act=True)
        self.kv_norm = Norm(dh)
        # The reference dequantizes wo_a and runs a bf16 per-group GEMM (no activation quant).
        self.wo_a = Linear(h * dh // spec.o_groups, spec.o_groups * spec.o_lora_rank,
                           quant_act=False)
        self.wo_b = Linear(spec.o_groups * spec.o_lora_rank, d, quant_act=True)
        self.attn_sink = f32_param(h)
        if layer.owns_compressor:
            self.compressor = Compressor(spec, layer)
        if layer.owns_indexer:
            self.indexer = Indexer(spec, layer)
        self.register_buffer("inv_freq", layer_inv_freq(spec, layer.compress_ratio),
                             persistent=False)

    def forward(self, k: KernelSet, x: torch.Tensor, batch: ForwardBatch | DecodeRows,
                published: Published, xq: torch.Tensor) -> torch.Tensor:
        """(N, D) bf16 collapsed + normed input and its Q8_32 values ``xq`` (what ``wq_a`` and
        ``wkv`` read: rounded once by the block) -> (N, D) bf16; appends to the caches (a
        :class:`DecodeRows` step: to the pools, all rows at once, without host syncs)."""
        spec, layer = self.spec, self.layer
        eps, pos, inv_freq = spec.rms_norm_eps, batch.positions, self.inv_freq
        qa = self.wq_a.rounded(k, xq)
        # the query latent's Q8_32 values from its norm's pass: what wq_b (and an indexer's
        # wq_b) read
        qrq = k.rms_norm_q8(qa, self.q_norm.weight, eps)[1]
        q = k.apply_rope(self.wq_b.rounded(k, qrq).view(-1, self.n_heads, self.head_dim), pos,
                         inv_freq, in_place=True)  # q: this layer's own tensor
        idx_q = self.indexer.queries(k, x, qrq, pos, inv_freq) if layer.owns_indexer else None
        kv = self.wkv.rounded(k, xq)
        comp = self.compressor.project(k, x) if layer.owns_compressor else None

        # the new tokens' window records in one fused op: Q8_32(rope(rms_norm(kv))); a
        # prefill's keys are their values (unpacking is exact), its rings get the last rows'
        records = k.window_kv_records(kv, self.kv_norm.weight, eps, pos, inv_freq)
        if isinstance(batch, DecodeRows):
            out = self._decode(k, q, records, comp, idx_q, published, batch)
        else:
            out = self._prefill_attention(k, q, records, comp, idx_q, batch, published)
        out = k.apply_rope(out, pos, inv_freq, inverse=True, in_place=True)
        z = k.grouped_linear(out.view(out.shape[0], spec.o_groups, -1), self.wo_a.weight)
        return self.wo_b(k, z.flatten(1))

    def _decode(self, k: KernelSet, q: torch.Tensor, records: torch.Tensor,
                comp: tuple[torch.Tensor, torch.Tensor | None] | None,
                idx_q: tuple[torch.Tensor, torch.Tensor] | None, published: Published,
                decode: DecodeRows) -> torch.Tensor:
        """Attention of a decode step over the paged pools, all N rows at once.

        Step 1: the N new window records (``records`` (N, D + D/32) uint8) go to ring slot
        ``p % W`` of each row's state slot.
        Step 2: the compressed entries this token completes (:meth:`_append_decode`).
        Step 3: the top-k of every row (:meth:`_decode_selection`).
        Step 4: per-row lists into the flattened pools, (N, W) window + (N, index_topk)
        compressed, and one attention op. Returns (N, H, Dh) like q.
        """
        layer, pool = self.layer, decode.pool
        window_idx = decode.window(layer.layer_id)  # (N, W), last column = the new position
        flat_window = pool.flat_window()
        flat_window[window_idx[:, -1]] = records
        entries = entry_idx = None
        if layer.compress_ratio > 0:
            if comp is not None:
                self._append_decode(k, comp, decode)
            entry_ids = self._decode_selection(k, idx_q, published, decode)
            entries = pool.flat_entries(layer.kv_source)
            # the pool rows of the picks: once per (KV source, index source) and step, shared
            # by the layers reusing them (7 launches each otherwise)
            key = (layer.kv_source, layer.index_source)
            entry_idx = published.attention_rows.get(key)
            if entry_idx is None:
                entry_idx = published.attention_rows[key] = decode.compressed(layer.kv_source,
                                                                              entry_ids)
        return attend_records(k, q, flat_window, window_idx, entries, entry_idx,
                              self.attn_sink, self.head_dim ** -0.5)

    def _append_decode(self, k: KernelSet, comp: tuple[torch.Tensor, torch.Tensor | None],
                       decode: DecodeRows) -> None:
        """The compressor of a decode step, every row at once (ratio r; row i at position p).

        Row i completes group ``e = p // r`` when ``(p + 1) % r == 0``: its entry is pooled
        from the r-1 partial rows of its slot and its own projection, and written with its
        index key to entry ``e``'s block row. Otherwise its projection goes to partial row
        ``p % r`` of its slot. Both writes run for every row, each redirected to the sentinels
        (slot 0, block 0) where it does not apply: no data-dependent shapes, no host sync.
        """
        src, r, pool = self.layer.layer_id, self.layer.compress_ratio, decode.pool
        slots = decode.slots
        groups = decode.groups(r)  # shared by the step's layers of this ratio
        complete = groups.complete
        if r == 1:
            latents = comp[0]
        else:
            kv, gate = comp[0], comp[1]
            partial_kv, partial_gate = pool.partial_kv[src], pool.partial_gate[src]
            # a complete row leaves no partial (its write goes to the sentinel slot 0)
            partial_kv[groups.keep_slot, groups.partial_row] = kv
            partial_gate[groups.keep_slot, groups.partial_row] = gate
            group_kv = torch.cat([partial_kv[slots], kv[:, None]], dim=1)  # (N, r, Dh)
            group_gate = torch.cat([partial_gate[slots], gate[:, None]], dim=1)
            pooled = k.compress_pool(group_kv, group_gate)  # rows of incomplete groups: unused
            latents = k.rms_norm(pooled.to(torch.bfloat16), self.compressor.norm.weight,
                                 self.spec.rms_norm_eps)
        group_pos = groups.group_pos
        keys = self.indexer.index_key_records(k, latents, group_pos, self.inv_freq)
        records = k.compressed_kv_records(latents, group_pos, self.inv_freq)
        rows = decode.compressed(src, groups.group[:, None])[:, 0]
        rows = torch.where(complete, rows, 0)  # sentinel block 0, row 0
        pool.flat_entries(src)[rows] = records
        pool.flat_index_keys(src)[rows] = keys

    def _decode_selection(self, k: KernelSet, idx_q: tuple[torch.Tensor, torch.Tensor] | None,
                          published: Published, decode: DecodeRows) -> torch.Tensor:
        """(N, index_topk) entry ids (-1 padded) of a decode step: its own top-k over each
        row's visible index keys if this layer is an index source, else the published one."""
        layer = self.layer
        if idx_q is None:
            return published.topk_rows[layer.index_source]
        candidates = None
        if layer.candidate_source is not None:
            candidates = published.candidate_rows[layer.candidate_source]
        src = layer.kv_source
        sel, cand = self.indexer.select_rows(
            k, idx_q[0], idx_q[1], decode.pool.flat_index_keys(src), decode.block_tables,
            decode.pool.entries_per_block[src], decode.key_width(src), decode.positions,
            candidates)
        sel = F.pad(sel, (0, self.spec.index_topk - sel.shape[1]), value=-1)
        published.topk_rows[layer.layer_id] = sel
        if cand is not None:
            published.candidate_rows[layer.layer_id] = cand
        return sel

    def _prefill_attention(self, k: KernelSet, q: torch.Tensor, records: torch.Tensor,
                      comp: tuple[torch.Tensor, torch.Tensor | None] | None,
                      idx_q: tuple[torch.Tensor, torch.Tensor] | None, batch: ForwardBatch,
                      published: Published) -> torch.Tensor:
        """Attention of any batch (prefill chunks, contiguous caches): per sequence its
        compressed-entry appends and (unless every sequence takes all its visible entries:
        ``_short_selection``) its top-k (ratio > 0), then for all sequences at once the window
        keys (each chunk sees its own earlier tokens; ``model/window_layout.py``), the ring
        writes, the selected entries and one attention op. Returns (N, H, Dh) like q."""
        layer = self.layer
        if not batch.caches:
            return torch.empty_like(q)
        picks: list[torch.Tensor] = []
        if layer.compress_ratio > 0:
            if comp is not None:  # before the top-k, which reads them
                self._append_entries(k, comp, batch)
            picks = self._short_selection(idx_q, batch, published)  # all rows, or []
            if not picks:
                picks = [self._selection(k, b, batch.rows(b), idx_q,
                                         batch.positions[batch.rows(b)], cache, published)
                         for b, cache in enumerate(batch.caches)]
        keys, indices = self._window_keys(k, records, batch)
        # the row lists depend on the window layout, the picks and the entry counts only: one
        # int32 tensor per (KV source, index source) and forward, shared by the layers that
        # reuse them (the attention kernels read int32 row ids)
        key = (layer.kv_source, layer.index_source) if picks else None
        rows, listed = published.attention_rows.get(key), None
        if picks:
            unpacked, counts = self._entries(k, batch, published)
            if rows is None:
                rows, listed = self._entry_rows(indices, keys.shape[0], picks, counts, batch)
            keys = torch.cat([keys, unpacked])
        if key not in published.attention_rows:  # this forward's first layer of the source
            published.attention_rows[key] = (indices if rows is None else rows).to(torch.int32)
            published.attention_counts[key] = listed
        rows, counts = published.attention_rows[key], published.attention_counts[key]
        # one op over every sequence's rows (a 4K chunk's result is 268 MB)
        return k.sparse_attention_sink(q, keys, rows, self.attn_sink, self.head_dim ** -0.5,
                                       row_counts=counts)

    def _window_keys(self, k: KernelSet, records: torch.Tensor, batch: ForwardBatch
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Window rows visible to the batch's chunks, and per-query row lists; writes each
        chunk's last rows to its sequence's ring.

        Args: records uint8 (N, Dh + Dh/32), the window records of the batch's rows. Returns
        keys (P + N, Dh) bf16, unpacked in one op: the up to W - 1 cached rows before each
        continuing chunk, then the batch's rows; indices (N, W) int64: query p's window
        ``p - W + 1 .. p`` ascending, -1 before its sequence's first key. A fixed W columns per
        query, whatever the chunk length (a (S, P + S) mask would make attention scan every
        key).
        """
        w, layer_id = self.spec.sliding_window, self.layer.layer_id
        layout = batch.window_layout(w)
        pool = batch.window_pool() if layout.pool_rows is not None else None
        rows = records
        if layout.prev:  # read before the ring writes below overwrite those slots
            if pool is not None:  # every sequence's rows in one gather
                state, ring_slot = layout.pool_rows[0]
                cached = pool[0][state, layer_id, ring_slot]
            else:
                cached = _cat([batch.caches[b].window_ring(layer_id)[slot:slot + n]
                               for b, first, start in layout.prev
                               for slot, _, n in window_layout.ring_ranges(first, start - first,
                                                                           w)])
            rows = torch.cat([cached, records])
        keys = k.unpack_window_kv(rows, self.head_dim, torch.bfloat16)
        indices = batch.window_indices(w)  # shared by the layers: not written to
        records = records[layout.tail_rows]
        if pool is not None:  # every sequence's tail in one write
            state, ring_slot = layout.pool_rows[1]
            pool[0][state, layer_id, ring_slot] = records
            return keys, indices
        done = 0
        for b, first, count in layout.tails:
            ring = batch.caches[b].window_ring(layer_id)
            for slot, offset, n in window_layout.ring_ranges(first, count, w):
                ring[slot:slot + n] = records[done + offset:done + offset + n]
            done += count
        return keys, indices

    def _entries(self, k: KernelSet, batch: ForwardBatch, published: Published
                 ) -> tuple[torch.Tensor, list[int]]:
        """Every sequence's compressed entries of this layer's KV source, unpacked to bf16 at
        once (batch order) and their counts; once per forward and source (``published``): the
        source layer appends first, the layers after it read the same entries."""
        src = self.layer.kv_source
        if src in published.entries:
            return published.entries[src]
        records, counts = entries_all(batch.caches, src)
        out = k.unpack_compressed_kv(records, self.head_dim, torch.bfloat16), counts
        if self.layer.layer_id >= src:  # the source's appends of this forward are in
            published.entries[src] = out
        return out

    def _entry_rows(self, indices: torch.Tensor, base: int, picks: list[torch.Tensor],
                    counts: list[int], batch: ForwardBatch
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The window row lists ``indices`` (N, W) followed by each sequence's picks (S_b, k_b)
        as key rows — its entries sit after the ``base`` window keys, in batch order (counts
        T_b: :meth:`_entries`) — -1 padded to the widest k (entries < 0 are skipped); and
        (N,) int32 each row's entries up to its last valid one, W + its valid picks (a row's
        picks come valid first, then -1: ``topk_positions``, ``Indexer.every_visible``; the
        window's last entry is the query itself). At 4K tokens ~10-20 % of a list is that
        padding early in a prompt; the attention reads no chunk past the count."""
        width = max(p.shape[1] for p in picks)
        offsets = []
        for n in counts:
            offsets.append(base)
            base += n
        sel = _cat([p if p.shape[1] == width else F.pad(p, (0, width - p.shape[1]), value=-1)
                    for p in picks])
        # per row its sequence's first entry row: a pinned, asynchronous copy (no host sync)
        shift = to_device(np.repeat(np.asarray(offsets, dtype=np.int64), batch.seq_lens),
                          sel.device)[:, None]
        valid = sel >= 0
        rows = torch.cat([indices, torch.where(valid, sel + shift, sel)], dim=1)
        return rows, valid.sum(1, dtype=torch.int32) + indices.shape[1]

    def _append_entries(self, k: KernelSet, comp: tuple[torch.Tensor, torch.Tensor | None],
                        batch: ForwardBatch) -> None:
        """Compress the groups the step's chunks complete, every sequence at once; append
        their index keys and FP4 entries to each sequence's cache."""
        src = self.layer.layer_id
        latents, group_pos, counts = self.compressor.emit(k, comp[0], comp[1], batch)
        if latents.shape[0] == 0:
            return
        keys = self.indexer.index_key_records(k, latents, group_pos, self.inv_freq)
        entries = k.compressed_kv_records(latents, group_pos, self.inv_freq)
        append_entries_all(batch.caches, src, entries, keys, counts)

    def _short_selection(self, idx_q: tuple[torch.Tensor, torch.Tensor] | None,
                         batch: ForwardBatch, published: Published) -> list[torch.Tensor]:
        """Every sequence's top-k at once when each takes every visible entry (every sequence
        at most ``index_topk`` entries: ``Indexer.picks_every_entry``; a layer consuming a
        candidate mask needs its source's mask of every row): the picks of all rows in one
        tensor (a one-element list; published for all rows and each sequence's (S_b, T_b)
        slice), or a reusing layer's index source's such picks; else [] (per sequence)."""
        layer = self.layer
        if idx_q is None:  # a layer reusing its index source's picks: all rows if it has them
            reused = published.topk_rows.get(layer.index_source)
            return [] if reused is None else [reused]
        if not indexer_mod.SHORT_PICKS:
            return []
        counts = [cache.num_entries(layer.kv_source) for cache in batch.caches]
        if not all(self.indexer.picks_every_entry(t) for t in counts):
            return []
        width, candidates = max(counts), None
        if layer.candidate_source is not None:  # the source's mask of every row, same width
            candidates = published.candidate_rows.get(layer.candidate_source)
            if candidates is None or candidates.shape[1] != width:
                return []
        sel, cand = self.indexer.every_visible(batch.positions, width, candidates)
        published.topk_rows[layer.layer_id] = sel
        if cand is not None:
            published.candidate_rows[layer.layer_id] = cand
        for b, t in enumerate(counts):  # for the layers that read one sequence's picks
            rows = batch.rows(b)
            published.topk[(layer.layer_id, b)] = sel[rows, :t]
            if cand is not None:
                published.candidates[(layer.layer_id, b)] = cand[rows, :t]
        return [sel]

    def _selection(self, k: KernelSet, b: int, rows: slice,
                   idx_q: tuple[torch.Tensor, torch.Tensor] | None, pos: torch.Tensor,
                   cache: CacheView, published: Published) -> torch.Tensor:
        """(S, k) compressed-entry ids this layer attends to: its own top-k if it is an index
        source (always scored against its KV source's complete key cache), else the top-k
        published by its index source in this forward."""
        layer = self.layer
        if idx_q is None:
            return published.topk[(layer.index_source, b)]
        candidates = None
        if layer.candidate_source is not None:
            candidates = published.candidates[(layer.candidate_source, b)]
        sel, cand = self.indexer.select(k, idx_q[0][rows], idx_q[1][rows],
                                        cache.index_key_records(layer.kv_source), pos,
                                        candidates)
        published.topk[(layer.layer_id, b)] = sel
        if cand is not None:
            published.candidates[(layer.layer_id, b)] = cand
        return sel


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat`` along dim 0, without a copy for a single part (a lone sequence)."""
    return parts[0] if len(parts) == 1 else torch.cat(parts)
