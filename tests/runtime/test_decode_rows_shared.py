"""What a decode step builds once and its layers share (``runtime/model/decode_rows.py``):

* ``DecodeRows.window``: every layer's (N, W) window rows (layer 0's rows plus l * W where
  valid) equal the per-layer formula ``window_rows`` exactly.
* ``DecodeRows.groups``: a row's compress group, its first position, completion, partial row
  and write slot, per ratio, equal the per-layer expressions the attention used before.

Oracle: the formulas themselves (what the per-layer path computed). Tolerance: exact.
"""

from types import SimpleNamespace

import torch

from deepinfer.runtime.model.decode_rows import DecodeRows, window_rows


def test_window_rows_of_every_layer_match_the_formula():
    layers, w = 5, 8
    pool = SimpleNamespace(spec=SimpleNamespace(num_hidden_layers=layers, sliding_window=w))
    positions = torch.tensor([0, 3, 7, 8, 29, 0], dtype=torch.int64)  # fresh, short, wrapped
    slots = torch.tensor([0, 2, 1, 3, 4, 0], dtype=torch.int64)
    tables = torch.zeros(6, 2, dtype=torch.int64)
    rows = DecodeRows(pool, torch.zeros(6, dtype=torch.int64), positions, slots, tables, 29)
    for layer in (3, 0, 4, 1, 2):  # any order: the first call builds every layer's
        want = window_rows(slots, positions, layers, w, layer)
        got = rows.window(layer)
        assert got.shape == (6, w) and got.is_contiguous()
        assert torch.equal(got, want), layer
    assert (rows.window(0)[0, :-1] == -1).all() and rows.window(0)[0, -1] >= 0


def test_compress_groups_match_the_per_layer_expressions():
    pool = SimpleNamespace(spec=SimpleNamespace(num_hidden_layers=2, sliding_window=4))
    positions = torch.tensor([0, 1, 2, 3, 7, 8, 127, 128], dtype=torch.int64)
    slots = torch.arange(1, 9, dtype=torch.int64)
    rows = DecodeRows(pool, torch.zeros(8, dtype=torch.int64), positions, slots,
                      torch.zeros(8, 1, dtype=torch.int64), 128)
    for r in (1, 2, 4):
        g = rows.groups(r)
        assert rows.groups(r) is g  # built once per step and ratio
        complete = (positions + 1) % r == 0
        assert torch.equal(g.complete, complete)
        assert torch.equal(g.group, torch.div(positions, r, rounding_mode="floor"))
        assert torch.equal(g.group_pos, torch.div(positions, r, rounding_mode="floor") * r)
        if r == 1:
            assert g.partial_row is None and g.keep_slot is None
        else:
            assert torch.equal(g.partial_row, (positions % r).clamp(max=r - 2))
            assert torch.equal(g.keep_slot, torch.where(complete, 0, slots))
