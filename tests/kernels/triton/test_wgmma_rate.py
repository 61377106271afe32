"""The sm_90 compile gate of bench/wgmma_rate.py's probe kernel (the register-A wgmma's pace
by N): the expert GEMM's per-group wgmma count, no spills, and its FLOP count."""

from __future__ import annotations

import os
import sys

import pytest

from deepinfer.kernels.triton.moe_gluon import HAS_GLUON

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "bench"))
import wgmma_rate  # noqa: E402


@pytest.mark.skipif(not HAS_GLUON, reason="needs triton's Gluon")
def test_wgmma_rate_compiles_for_sm90(sm90_compile):
    cases = wgmma_rate.aot_cases()
    results = sm90_compile(cases)
    for case in cases:
        k = case["constexprs"]
        per_step = 4 * k["REP"] * (2 if k["BN2"] else 1) * 2  # groups x fragments x acc x k16
        assert results[case["id"]]["wgmma_count"] == per_step, (case["id"], results[case["id"]])


def test_flops_count_the_fragments_tokens_and_groups():
    # 2 programs x 3 steps x 4 groups x REP 2 x 64 rows x (64 + 16) tokens x 32 K, 2 a MAC
    assert wgmma_rate.flops(2, 3, 64, 16, 2) == 2 * 2 * 3 * 4 * 2 * 64 * 80 * 32
