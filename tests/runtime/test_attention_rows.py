"""A prefill step's attention row lists (runtime/model/attention.py ``_prefill_attention``):
built once per (KV source, index source) and forward as int32 — the window layout's lists,
then the picks' entry rows — and shared by the layers that reuse that source's picks and
entries (the reference logits are unchanged: test_model_incremental.py and the others)."""

from __future__ import annotations

import torch

from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.cache import SequenceCache
from tests.runtime.paged_helpers import tiny_model


class RowsSpy(KernelSet):
    """The reference ops; records the row lists each attention call gets."""

    def __init__(self):
        super().__init__()
        self.rows: list[torch.Tensor] = []
        self.counts: list[torch.Tensor | None] = []

    def __getattr__(self, op: str):
        fn = super().__getattr__(op)
        if op != "sparse_attention_sink":
            return fn

        def call(q, keys, rows, *rest, row_counts=None):
            self.rows.append(rows)
            self.counts.append(row_counts)
            return fn(q, keys, rows, *rest, row_counts=row_counts)

        return call


def test_row_lists_are_int32_and_shared_by_reusing_layers():
    model = tiny_model()
    spy = RowsSpy()
    model.kernels = spy
    ids = torch.randint(0, 500, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    model(ForwardBatch.build([ids], [SequenceCache.empty(model.spec)]))
    layers = [block.attn.layer for block in model.layers]
    assert len(spy.rows) == len(layers)
    assert all(r.dtype == torch.int32 for r in spy.rows)
    keys = [(lay.kv_source, lay.index_source) if lay.compress_ratio > 0 else None
            for lay in layers]
    first: dict = {}
    for key, rows in zip(keys, spy.rows, strict=True):
        if key in first:  # the same tensor, not a rebuilt copy
            assert rows is first[key]
        first[key] = rows
    assert len(first) < len(layers)  # the tiny model has reusing layers
    w = model.spec.sliding_window
    assert spy.rows[keys.index(None)].shape == (len(ids), w)  # window-only: the window lists


def test_decode_entry_rows_shared_by_reusing_layers(monkeypatch):
    """A decode step maps its picks to pool rows once per (KV source, index source): the
    layers reusing a source's picks get the same tensor."""
    from deepinfer.runtime.model import attention as attention_mod
    from deepinfer.runtime.model import decode_rows
    from tests.runtime.paged_helpers import garbage_pool

    model = tiny_model()
    spec = model.spec
    pool = garbage_pool(spec, num_blocks=24, num_slots=3)
    tables = [torch.arange(1, 12), torch.arange(12, 23)]
    ids = torch.randint(3, 500, (2, 31), generator=torch.Generator().manual_seed(5)).tolist()
    model(ForwardBatch.build([ids[0][:30], ids[1][:30]],
                             [pool.view(tables[b], b + 1, 0) for b in range(2)]))
    seen: list[torch.Tensor | None] = []

    def spy(k, q, window, window_idx, entries, entry_idx, *rest):
        seen.append(entry_idx)
        return decode_rows.attend_records(k, q, window, window_idx, entries, entry_idx, *rest)

    monkeypatch.setattr(attention_mod, "attend_records", spy)
    model(ForwardBatch.build([[ids[0][30]], [ids[1][30]]],
                             [pool.view(tables[b], b + 1, 30) for b in range(2)]))
    layers = [block.attn.layer for block in model.layers]
    assert len(seen) == len(layers)
    first: dict = {}
    for layer, rows in zip(layers, seen, strict=True):
        if layer.compress_ratio == 0:
            assert rows is None
            continue
        key = (layer.kv_source, layer.index_source)
        if key in first:
            assert rows is first[key]
        first[key] = rows
    assert len(first) < sum(layer.compress_ratio > 0 for layer in layers)


def test_row_counts_end_at_each_rows_last_pick():
    """The lists with picks come with each row's count (its last valid entry + 1, computed
    once per source like the lists): every entry past it is -1 and the entry before it is
    valid; early queries of a prompt see fewer entries than ``index_topk``, so some rows
    end in padding (a 60-token prompt, two sequences of different lengths in one step);
    window-only lists have no counts."""
    model = tiny_model()
    spy = RowsSpy()
    model.kernels = spy
    gen = torch.Generator().manual_seed(6)
    ids = [torch.randint(0, 500, (n,), generator=gen).tolist() for n in (60, 23)]
    model(ForwardBatch.build(ids, [SequenceCache.empty(model.spec) for _ in ids]))
    layers = [block.attn.layer for block in model.layers]
    padded = 0
    for lay, rows, counts in zip(layers, spy.rows, spy.counts, strict=True):
        if lay.compress_ratio == 0:
            assert counts is None
            continue
        assert counts.dtype == torch.int32 and counts.shape == (rows.shape[0],)
        listed = torch.arange(rows.shape[1])
        assert bool((rows[listed[None, :] >= counts[:, None].long()] == -1).all())
        last = rows.gather(1, (counts.long() - 1).clamp(min=0)[:, None])[:, 0]
        assert bool((last >= 0).all())
        padded += int((counts < rows.shape[1]).sum())
    assert padded > 0
