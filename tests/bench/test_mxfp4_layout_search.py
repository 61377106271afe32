"""bench/mxfp4_layout_search.py: the decode-cost model of the W4A8 order's words (session 34's
finding that no layout makes the prefill's bf16 decode much cheaper without the FP8 decode's
price)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import mxfp4_layout_search as ls  # noqa: E402


def test_the_shipped_layout_costs_what_its_ptx_shows():
    """FP8: one mask for the lo values, two rotations and two masks for the hi ones (5, as
    ``moe_gluon_w4a8``'s decode); bf16: 17 in the model (the PTX's IMAD trick makes it 16)."""
    assert ls.cost(ls.shipped_layout(), "fp8")[0] == 5
    assert ls.cost(ls.shipped_layout(), "bf16")[0] == 17


def test_no_four_rotations_tile_the_bf16_registers_and_the_optimum_costs_fp8():
    """The bf16 target bits do not tile the word by four rotations; the nine-instruction
    layout exists and makes the FP8 decode 11; positions moved apart per bit type cost the
    FP8 decode more (the model reads the positions, not just the layout's shape)."""
    assert ls.bf16_target() == [6, 7, 8, 15, 22, 23, 24, 31]
    assert ls.rotation_tilings(ls.bf16_target()) == []
    assert ls.rotation_tilings([0, 1, 2, 3, 16, 17, 18, 19]) != []  # a tiling target does
    opt = ls.bf16_optimal_layout()
    assert ls.cost(opt, "bf16")[0] == 9 and ls.cost(opt, "fp8")[0] == 11
    scrambled = [{t: (p + 3 * i) % 32 for i, (t, p) in enumerate(v.items())}
                 for v in ls.shipped_layout()]
    assert ls.cost(scrambled, "fp8")[0] > 5
