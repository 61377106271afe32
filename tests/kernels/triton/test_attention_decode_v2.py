"""Decode attention kernel v2 (kernels/triton/attention_decode.py) against the torch reference.

Interpreter runs (fp32 q: fp32 dots, the tl twin of the record decode) on small shapes with the
production head_dim 512 where it matters (two channel halves of 256, 64-row chunks), a few
heads and queries: random records, -1 entries, empty window or compressed lists, different
list lengths per query, row counts that are not a multiple of the chunk; and the routing of
decode-sized record launches through ``attention.DECODE_KERNEL``.
Tolerance as tests/kernels/triton/test_attention_side_attention.py (fp32 end to end: 1e-5).
"""

import pytest
import torch

pytest.importorskip("triton")

from deepinfer.kernels import formats  # noqa: E402
from deepinfer.kernels.reference import attention_fused as ref_fused  # noqa: E402
from deepinfer.kernels.triton import attention as tri  # noqa: E402
from deepinfer.kernels.triton import attention_decode as v2  # noqa: E402

TOL = dict(atol=1e-5, rtol=1e-5)


def _inputs(n, h, d, w, t, kw, kc, gen, with_compressed=True):
    q = torch.randn(n, h, d, generator=gen)
    window = formats.pack_window_kv(torch.randn(w, d, generator=gen) * 2)
    wi = torch.randint(-1, w, (n, kw), generator=gen)
    sink = torch.randn(h, generator=gen)
    comp = ci = None
    if with_compressed:
        comp = formats.pack_compressed_kv(torch.randn(t, d, generator=gen))
        ci = torch.randint(-1, t, (n, kc), generator=gen)
    return q, window, wi, comp, ci, sink


def _run_v2(q, window, wi, comp, ci, sink):
    d = q.shape[-1]
    out = torch.full(q.shape, float("nan"), dtype=q.dtype)
    has_b = comp is not None and ci is not None and ci.shape[-1] > 0 and comp.shape[0] > 0
    b, ib = (comp, ci) if has_b else (window, wi)
    return v2.launch(q, window, wi, b, ib, has_b, sink, d ** -0.5, out)


@pytest.mark.parametrize("d,kw,kc", [(512, 70, 100), (128, 16, 130), (64, 5, 0)])
def test_v2_matches_reference(d, kw, kc):
    """List lengths not a multiple of the 64-row chunk (70, 100, 130, 5); -1 entries; query 0
    without any valid row (exactly 0), query 1 with no valid window row, query 2 with no valid
    compressed row."""
    gen = torch.Generator().manual_seed(31)
    n, h, w, t = 4, 4, 90, 150
    q, window, wi, comp, ci, sink = _inputs(n, h, d, w, t, kw, kc, gen, with_compressed=kc > 0)
    wi[0] = -1
    wi[1] = -1
    if ci is not None:
        ci[0] = -1
        ci[2] = -1
    out = _run_v2(q, window, wi, comp, ci, sink)
    want = ref_fused.sparse_attention_sink_records(q, window, wi, comp, ci, sink, d ** -0.5)
    torch.testing.assert_close(out, want, **TOL)
    if ci is not None:
        assert bool((out[0] == 0).all())


def test_v2_empty_lists_and_padding():
    """Lists padded with -1 at different lengths per query (a decode batch's fixed-width lists);
    an empty (0-wide) compressed list; one query seeing a single row in the last chunk."""
    gen = torch.Generator().manual_seed(37)
    d, n, h, w, t = 256, 3, 8, 40, 200
    q, window, wi, comp, ci, sink = _inputs(n, h, d, w, t, 40, 140, gen)
    for i, (lw, lc) in enumerate([(40, 140), (13, 65), (0, 0)]):
        wi[i, lw:] = -1
        ci[i, lc:] = -1
    ci[2, 139] = 7  # query 2: one compressed row, in the third chunk
    out = _run_v2(q, window, wi, comp, ci, sink)
    want = ref_fused.sparse_attention_sink_records(q, window, wi, comp, ci, sink, d ** -0.5)
    torch.testing.assert_close(out, want, **TOL)
    empty = ci[:, :0]
    out = _run_v2(q, window, wi, comp, empty, sink)
    want = ref_fused.sparse_attention_sink_records(q, window, wi, comp, empty, sink, d ** -0.5)
    torch.testing.assert_close(out, want, **TOL)


@pytest.mark.parametrize("kernel", ["v1", "v2"])
def test_decode_kernel_switch_routes_records(kernel, monkeypatch):
    """``attention.DECODE_KERNEL = "v2"`` sends decode-sized record launches to v2 (and only
    those: float rows and prefill-sized launches stay on v1); "v1" never calls it."""
    monkeypatch.setattr(tri, "DECODE_KERNEL", kernel)
    calls = []
    real = v2.launch
    monkeypatch.setattr(v2, "launch", lambda *a, **k: calls.append(1) or real(*a, **k))
    gen = torch.Generator().manual_seed(47)
    d, n, h = 64, 2, 4
    q, window, wi, comp, ci, sink = _inputs(n, h, d, 20, 30, 10, 12, gen)
    out = tri.sparse_attention_sink_records(q, window, wi, comp, ci, sink, d ** -0.5)
    want = ref_fused.sparse_attention_sink_records(q, window, wi, comp, ci, sink, d ** -0.5)
    torch.testing.assert_close(out, want, **TOL)
    assert len(calls) == (1 if kernel == "v2" else 0)
    kv = torch.randn(20, d, generator=gen)
    tri.sparse_attention_sink(q, kv, wi, sink, d ** -0.5)  # float rows: always v1
    monkeypatch.setattr(tri, "PREFILL_MIN_QUERIES", 1)  # 2 queries count as a prefill
    tri.sparse_attention_sink_records(q, window, wi, comp, ci, sink, d ** -0.5)
    assert len(calls) == (1 if kernel == "v2" else 0)
