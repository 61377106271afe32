"""Triton sparse attention with sink (kernels/triton/attention.py) against the torch reference.

Interpreter runs on tiny shapes (D=64, a few heads); the SM90 compile gate uses the released
shapes (64 heads x 512, window 128 + top-k 512 lists are runtime lengths).

Tolerances: with fp32 q the kernel is fp32 end to end (the interpreter's fp32 dot is exact
fp32), so it matches the fp64 reference to fp32 rounding of a 60-term softmax: atol 1e-5.
With fp16 q the dots take fp16 operands (the dequantized keys are exact in fp16; the
probabilities p in [0, 1] are rounded to fp16, 2^-11 relative) and the output is fp16: atol/rtol
2e-3 (a few fp16 ulps of outputs of magnitude ~1).
"""

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from deepinfer.kernels import formats  # noqa: E402
from deepinfer.kernels.reference import attention as ref  # noqa: E402
from deepinfer.kernels.reference import attention_fused as ref_fused  # noqa: E402
from deepinfer.kernels.triton import attention as tri  # noqa: E402

D = 64
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3)}


def _indices(n: int, k: int, rows: int, gen: torch.Generator) -> torch.Tensor:
    idx = torch.randint(-1, rows, (n, k), generator=gen)
    idx[-1] = -1  # a query with no valid row: output must be exactly 0
    return idx


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("heads", [8, 6])  # 6: a head block with masked heads
def test_sparse_attention_sink_matches_reference(dtype, heads):
    gen = torch.Generator().manual_seed(1)
    n, m, k = 3, 40, 37
    q = torch.randn(n, heads, D, generator=gen).to(dtype)
    kv = torch.randn(m, D, generator=gen).to(dtype)
    idx = _indices(n, k, m, gen)
    sink = torch.randn(heads, generator=gen)
    out = tri.sparse_attention_sink(q, kv, idx, sink, D ** -0.5)
    want = ref.sparse_attention_sink(q, kv, idx, sink, D ** -0.5)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), want.float(), **TOL[dtype])
    assert bool((out[-1] == 0).all())


def test_sparse_attention_row_counts():
    """``row_counts``: query n lists only its first counts[n] entries. Counts at each row's
    last valid entry + 1 (what the prefill passes: the rest is -1 padding) give the bits of
    the call without them; counts that cut valid entries give the reference's result for the
    shortened lists (the Triton kernel gets those entries as -1)."""
    gen = torch.Generator().manual_seed(3)
    n, heads, m, k = 5, 4, 40, 37
    q = torch.randn(n, heads, D, generator=gen)
    kv = torch.randn(m, D, generator=gen)
    idx = _indices(n, k, m, gen)
    sink = torch.randn(heads, generator=gen)
    ends = torch.tensor([37, 20, 5, 1, 0])
    idx[torch.arange(k)[None, :] >= ends[:, None]] = -1  # padding after each row's end
    last = torch.where(idx >= 0, torch.arange(1, k + 1), 0).amax(1)
    full = tri.sparse_attention_sink(q, kv, idx, sink, D ** -0.5)
    got = tri.sparse_attention_sink(q, kv, idx, sink, D ** -0.5, row_counts=last)
    assert torch.equal(got, full)
    cut = torch.tensor([10, 3, 37, 0, 2])
    got = tri.sparse_attention_sink(q, kv, idx, sink, D ** -0.5, row_counts=cut)
    want = ref.sparse_attention_sink(q, kv, idx, sink, D ** -0.5, row_counts=cut)
    shortened = torch.where(torch.arange(k)[None, :] < cut[:, None], idx, -1)
    assert torch.equal(want, ref.sparse_attention_sink(q, kv, shortened, sink, D ** -0.5))
    torch.testing.assert_close(got, want, **TOL[torch.float32])
    assert bool((got[3] == 0).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("with_compressed", [True, False])
def test_sparse_attention_records_matches_reference(dtype, with_compressed):
    gen = torch.Generator().manual_seed(2)
    n, h, w, t = 3, 8, 16, 30
    q = torch.randn(n, h, D, generator=gen).to(dtype)
    window = formats.pack_window_kv(torch.randn(w, D, generator=gen) * 2)
    wi = _indices(n, 10, w, gen)
    sink = torch.randn(h, generator=gen)
    comp, ci = None, None
    if with_compressed:
        comp = formats.pack_compressed_kv(torch.randn(t, D, generator=gen))
        ci = _indices(n, 21, t, gen)
        ci[-1, 3] = 5  # the last query sees only one compressed row
    out = tri.sparse_attention_sink_records(q, window, wi, comp, ci, sink, D ** -0.5)
    want = ref_fused.sparse_attention_sink_records(q, window, wi, comp, ci, sink, D ** -0.5)
    torch.testing.assert_close(out.float(), want.float(), **TOL[dtype])


@pytest.mark.parametrize("d,heads,prefill", [(256, 16, False), (512, 64, False),
                                             (256, 16, True)])
def test_sparse_attention_records_production_tiling(d, heads, prefill, monkeypatch):
    """Head dims >= 128 take the production tiling the D=64 tests do not: several q.k slices
    (DC) and an output split across programs (DV_SPLIT) that reloads its V slice; prefill:
    the prefill-sized launch's 64-row chunks (rows lists longer than one chunk)."""
    gen = torch.Generator().manual_seed(13)
    n, w, t = 2, 8, 12
    if prefill:
        monkeypatch.setattr(tri, "PREFILL_MIN_QUERIES", 1)  # 2 queries count as a prefill
        w, t = 80, 140
        assert tri.launch_meta(d, heads, tri.FMT_FP8, tri.FMT_FP4, True, num_queries=n)["BK"] \
            == tri.PREFILL_BLOCK_ROWS
    q = torch.randn(n, heads, d, generator=gen)
    window = formats.pack_window_kv(torch.randn(w, d, generator=gen) * 2)
    comp = formats.pack_compressed_kv(torch.randn(t, d, generator=gen))
    wi = _indices(n, 70 if prefill else 6, w, gen)
    ci = _indices(n, 100 if prefill else 9, t, gen).to(torch.int32)  # int32 lists are accepted
    sink = torch.randn(heads, generator=gen)
    meta = tri.launch_meta(d, heads, tri.FMT_FP8, tri.FMT_FP4, True)
    assert meta["DJ"] < d // 2 and meta["DC"] < d // 2
    out = tri.sparse_attention_sink_records(q, window, wi, comp, ci, sink, d ** -0.5)
    want = ref_fused.sparse_attention_sink_records(q, window, wi, comp, ci, sink, d ** -0.5)
    torch.testing.assert_close(out, want, **TOL[torch.float32])


@pytest.mark.parametrize("heads,split,prefill", [(16, 2, False), (16, 2, True),
                                                 (16, 1, True)])
def test_sparse_attention_float_rows_production_tiling(heads, split, prefill, monkeypatch):
    """Float rows (the prefill path: unpacked window and entries) take contiguous channel
    halves (CS=1, PS=D/2) at D=256: several q.k slices, the output split across programs or
    (split 1, prefill) one program over all channels; the mapping must put every output
    channel back in place and match the reference."""
    monkeypatch.setattr(tri, "PREFILL_DV_SPLIT", split)
    if prefill:
        monkeypatch.setattr(tri, "PREFILL_MIN_QUERIES", 1)
    d, n, m = 256, 3, 150
    meta = tri.launch_meta(d, heads, tri.FMT_FLOAT, tri.FMT_FLOAT, False, num_queries=n)
    assert (meta["CS"], meta["PS"]) == (1, d // 2)
    assert meta["DJ"] == d // 2 // split and meta["DC"] < d // 2
    gen = torch.Generator().manual_seed(17)
    q = torch.randn(n, heads, d, generator=gen)
    kv = torch.randn(m, d, generator=gen)
    idx = _indices(n, 90, m, gen)
    sink = torch.randn(heads, generator=gen)
    out = tri.sparse_attention_sink(q, kv, idx, sink, d ** -0.5)
    want = ref.sparse_attention_sink(q, kv, idx, sink, d ** -0.5)
    torch.testing.assert_close(out, want, **TOL[torch.float32])
    assert bool((out[-1] == 0).all())


def test_sparse_attention_sm90_compiles():
    sys.path.insert(0, str(Path(__file__).parent))
    from aot_attention_side import SM90_SHARED_LIMIT, compile_cases

    for r in compile_cases("attention"):
        print(r)
        assert r["shared"] < SM90_SHARED_LIMIT, r
        assert r["wgmma"] > 0, r  # 64-head tiles must reach Hopper's warpgroup MMA
