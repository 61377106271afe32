"""bench/moe_parts_padding.py: the rows the prefill expert GEMM multiplies per parts setting."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import moe_parts_padding  # noqa: E402


def test_padded_rows_count_each_block_at_its_part_tiles():
    """Full blocks at BM, each expert's last block at ``part_tiles``' N: 1 pair -> 16 (eighths)
    / 32 (quarters), 17 -> 32 / 32, 72 -> 64 + 16 / 64 + 32; eighths fall back to quarters at
    BM 64."""
    counts = torch.tensor([1, 17, 128, 129, 200, 0])
    assert moe_parts_padding.padded_rows(counts, 128, 8) == 16 + 32 + 128 + 144 + 208
    assert moe_parts_padding.padded_rows(counts, 128, 4) == 32 + 32 + 128 + 160 + 224
    assert moe_parts_padding.padded_rows(counts, 128, 1) == 128 * 7
    assert moe_parts_padding.padded_rows(counts, 64, 8) == \
        moe_parts_padding.padded_rows(counts, 64, 4)
    routed = moe_parts_padding.routed_counts(512, 32, 4, seed=0)
    assert int(routed.sum()) == 512 * 4 and routed.numel() == 32
