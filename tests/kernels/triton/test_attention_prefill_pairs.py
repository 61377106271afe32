"""The prefill sparse attention with the math warpgroups on chunks of their own
(kernels/triton/attention_prefill_pairs.py) on CPU.

Gluon has no interpreter: the kernel runs on the GPU only (tests/gpu/test_attention_side_gpu.py,
``attention.PREFILL_KERNEL = "pairs"``, against the torch reference and the split kernel).
Here: the sm_90 compile gate (no spills beyond a few loader words, shared memory for q, four
half-chunks and two P tiles, the wgmma count of one pair: per warpgroup D / 16 k16 steps of
q . k and 2 x BK / 16 of p . v), at D = 512 / 256 / 128 / 64.
"""

from __future__ import annotations

import pytest

from deepinfer.kernels.triton import attention_prefill_pairs as app


@pytest.mark.skipif(not app.HAS_GLUON, reason="needs triton's Gluon")
def test_attention_prefill_pairs_compiles_for_sm90(sm90_compile):
    cases = app.aot_cases()
    results = sm90_compile(cases)
    for case in cases:
        d = case["constexprs"]["D"]
        r = results[case["id"]]
        assert r["wgmma_count"] == 2 * (d // 16 + 2 * app.BK // 16), (case["id"], r)
        # q + four half-chunks [BK, D / 2] + two P tiles [64, BK], bf16
        assert r["shared"] >= (64 * d + 2 * app.BK * d + 2 * 64 * app.BK) * 2, r["shared"]
