"""``DecodeRows.window``: every layer's (N, W) window rows, built once per step (layer 0's rows
plus l * W where valid), equal the per-layer formula ``decode_rows.window_rows`` exactly; a
layer id outside [0, L) still goes through the formula.

Oracle: ``window_rows`` itself (the formula the per-layer path used). Tolerance: exact.
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
    assert torch.equal(rows.window(layers), window_rows(slots, positions, layers, w, layers))
