"""The prefill sparse attention in Gluon (kernels/triton/attention_prefill_gluon.py) on CPU.

Gluon has no interpreter: the kernel runs on the GPU only (tests/gpu/test_attention_side_gpu.py,
``attention.PREFILL_KERNEL = "gl"``, against the torch reference and the Triton kernel). Here:
the sm_90 compile gate (no spills, shared memory under SM90's limit, the wgmma count of one
chunk: D / 16 k16 steps of q . k and BK / 16 of p . v), and the dispatch rules of
``attention._launch`` (which launches may take it) on CPU tensors.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer.kernels.triton import attention
from deepinfer.kernels.triton import attention_prefill_gluon as apg


@pytest.mark.skipif(not apg.HAS_GLUON, reason="needs triton's Gluon")
def test_attention_prefill_gl_compiles_for_sm90(sm90_compile):
    cases = apg.aot_cases()
    results = sm90_compile(cases)
    for case in cases:
        d = case["constexprs"]["D"]
        r = results[case["id"]]
        assert r["wgmma_count"] == d // 16 + apg.BK // 16, (case["id"], r["wgmma_count"])
        if d == 512:  # q + two chunk slots: one program per SM
            assert r["shared"] >= (64 + 2 * apg.BK) * d * 2, r["shared"]


def test_accepts_only_bf16_rows_on_an_sm90_gpu():
    """CPU tensors are never taken (the Triton kernel or the reference runs them), and the
    shape rules hold on their own."""
    q = torch.zeros(300, 64, 512, dtype=torch.bfloat16)
    kv = torch.zeros(1000, 512, dtype=torch.bfloat16)
    idx = torch.zeros(300, 640, dtype=torch.int64)
    assert not apg.accepts(q, kv, idx)  # not on a GPU
    assert attention.PREFILL_KERNEL in ("gl", "triton")
