"""The prefill sparse attention in Gluon (kernels/triton/attention_prefill_pairs.py) on CPU.

Gluon has no interpreter: the kernel runs on the GPU only (tests/gpu/test_attention_side_gpu.py,
``attention.PREFILL_KERNEL = "pairs"``, against the torch reference and the Triton kernel).
Here: the sm_90 compile gate (no spills beyond a few loader words, shared memory for q, four
half-chunks and two P tiles, the wgmma count of one pair: per warpgroup D / 16 k16 steps of
q . k and 2 x BK / 16 of p . v), at D = 512 / 256 / 128 / 64; and the dispatch rules of
``attention._launch`` (which launches may take it) on CPU tensors.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer.kernels.triton import attention
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


def test_prefill_sized_launch_falls_back_off_the_gpu():
    """A prefill-sized launch (more than ``PREFILL_MIN_QUERIES`` queries) on the CPU is not
    the Gluon kernel's (``accepts`` is False there) and runs the Triton kernel under the
    interpreter, which agrees with the reference, -1 rows and a list ending mid-chunk
    included."""
    from deepinfer.kernels.reference import attention as ref

    g = torch.Generator().manual_seed(0)
    n, h, d, m, k = attention.PREFILL_MIN_QUERIES + 8, 4, 64, 300, 40
    q = torch.randn(n, h, d, generator=g)
    kv = torch.randn(m, d, generator=g)
    idx = torch.randint(-1, m, (n, k), generator=g)
    idx[0] = -1
    sink = torch.randn(h, generator=g)
    assert not app.accepts(q.bfloat16(), kv.bfloat16(), idx)
    out = attention.sparse_attention_sink(q, kv, idx, sink, d ** -0.5)
    want = ref.sparse_attention_sink(q, kv, idx, sink, d ** -0.5)
    assert torch.allclose(out, want, atol=1e-4, rtol=1e-4)
    assert bool((out[0] == 0).all())


def test_no_rows_is_a_zero_output_without_a_launch():
    """An empty row list leaves only the sink in the denominator: zeros, as the reference
    gives for rows that are all -1 (no kernel runs, so this holds on the CPU too)."""
    from deepinfer.kernels.reference import attention as ref

    q = torch.randn(5, 64, 64).bfloat16()
    kv = torch.randn(10, 64).bfloat16()
    sink = torch.randn(64)
    out = torch.full_like(q, float("nan"))
    app.sparse_attention_sink_pairs(q, kv, torch.zeros(5, 0, dtype=torch.int64), sink, 0.125, out)
    want = ref.sparse_attention_sink(q, kv, torch.full((5, 1), -1), sink, 0.125)
    assert torch.equal(out, want) and bool((out == 0).all())


def test_out_writes_into_a_row_slice_of_a_larger_output():
    """``out=``: both backends write the result into the given rows of a larger buffer (the
    model's per-sequence call), leave the other rows alone and return that view; a
    mismatched buffer is a clear error."""
    from deepinfer.kernels.reference import attention as ref

    g = torch.Generator().manual_seed(1)
    q = torch.randn(12, 4, 64, generator=g)
    kv = torch.randn(30, 64, generator=g)
    idx = torch.randint(-1, 30, (12, 9), generator=g)
    sink = torch.randn(4, generator=g)
    want = ref.sparse_attention_sink(q, kv, idx, sink, 0.125)
    for fn in (ref.sparse_attention_sink, attention.sparse_attention_sink):
        big = torch.full((20, 4, 64), 7.0)
        got = fn(q, kv, idx, sink, 0.125, out=big[5:17])
        assert got.data_ptr() == big[5:17].data_ptr()
        assert torch.allclose(big[5:17], want, atol=1e-4, rtol=1e-4)
        assert bool((big[:5] == 7).all()) and bool((big[17:] == 7).all())
    with pytest.raises(ValueError, match="must match q"):
        attention.sparse_attention_sink(q, kv, idx, sink, 0.125, out=torch.empty(11, 4, 64))
