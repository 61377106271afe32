"""Attention-side Triton kernels on the GPU at the released V4.1 shapes, against the references.

Fresh random inputs each run; every output buffer the kernels allocate is poisoned first (NaN for
float outputs, 0xFF bytes for records, a garbage value for integer outputs) through
``attn_common.alloc``, so an element a kernel forgets to write fails. Errors are reported as
``||out - ref|| / ||ref||`` (records: of their dequantized values, plus the fraction of differing
bytes) with tolerances from the dtypes involved; run with ``-s`` to see the table and timings.

    python -m pytest -q -m gpu -s tests/gpu/test_attention_side_gpu.py
"""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.gpu

triton = pytest.importorskip("triton")

from deepinfer.kernels import formats  # noqa: E402
from deepinfer.kernels.reference import attention as ref_attn  # noqa: E402
from deepinfer.kernels.reference import attention_fused as ref_fused  # noqa: E402
from deepinfer.kernels.reference import compressor as ref_comp  # noqa: E402
from deepinfer.kernels.reference import compressor_fused as ref_comp_fused  # noqa: E402
from deepinfer.kernels.reference import indexer as ref_idx  # noqa: E402
from deepinfer.kernels.reference import quant, rope  # noqa: E402

H, D, W, TOPK, HI, DI = 64, 512, 128, 512, 32, 128
ROWS: list[tuple[str, str, float, float, str]] = []


def _poison(shape, dtype, device):
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    if dtype == torch.uint8:
        return torch.full(shape, 0xFF, dtype=dtype, device=device)
    return torch.full(shape, -7, dtype=dtype, device=device)


@pytest.fixture(autouse=True)
def poisoned(monkeypatch):
    from deepinfer.kernels.triton import attn_common

    monkeypatch.setattr(attn_common, "alloc", _poison)


@pytest.fixture(scope="module", autouse=True)
def table():
    yield
    print("\n{:<44} {:>12} {:>10} {:>10}  {}".format("kernel", "rel err", "tol", "ms", "note"))
    for name, err, tol, ms, note in ROWS:
        print(f"{name:<44} {err:>12.3e} {tol:>10.1e} {ms:>10.3f}  {note}")


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if not bool(torch.isfinite(out[torch.isfinite(ref)]).all()):
        return math.inf
    fin = torch.isfinite(ref)
    if not torch.equal(fin, torch.isfinite(out)) or not torch.equal(out[~fin], ref[~fin]):
        return math.inf
    return float((out[fin] - ref[fin]).norm() / ref[fin].norm().clamp_min(1e-30))


def _time_ms(fn, reps: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def _record(name: str, err: float, tol: float, ms: float, note: str = "") -> None:
    ROWS.append((name, err, tol, ms, note))
    assert err <= tol, f"{name}: rel err {err:.3e} > {tol:.1e} {note}"


def _attn_inputs(n: int, dev: str):
    q = torch.randn(n, H, D, device=dev).to(torch.bfloat16)
    sink = torch.randn(H, device=dev)
    window = formats.pack_window_kv(torch.randn(n * W, D, device=dev) * 2)
    wi = (torch.arange(n, device=dev)[:, None] * W + torch.arange(W, device=dev)[None, :])
    wi = torch.where(torch.rand(n, W, device=dev) < 0.1, -1, wi)  # some slots never written
    t = 16384
    comp = formats.pack_compressed_kv(torch.randn(t, D, device=dev))
    ci = torch.randint(0, t, (n, TOPK), device=dev)
    ci[:, TOPK - 37:] = -1
    return q, sink, window, wi, comp, ci


# Tolerance: q and the output are bf16, keys are exact in bf16, p is rounded to bf16 for the
# PV dot (2^-9 relative) and the output to bf16 (2^-9): ~3e-3 relative in norm; 1e-2 allowed.
ATTN_TOL = 1e-2


@pytest.mark.parametrize("n", [64, 1024])  # decode batch of 64 / a 1024-token prefill chunk
def test_sparse_attention_records(n):
    from deepinfer.kernels.triton import attention as tri

    q, sink, window, wi, comp, ci = _attn_inputs(n, "cuda")
    out = tri.sparse_attention_sink_records(q, window, wi, comp, ci, sink, D ** -0.5)
    want = ref_fused.sparse_attention_sink_records(q, window, wi, comp, ci, sink, D ** -0.5)
    times = []
    for split in (2, 4):  # report both output splits (compile-tested default: DV_SPLIT)
        old = tri.DV_SPLIT
        tri.DV_SPLIT = split
        try:
            times.append(_time_ms(lambda: tri.sparse_attention_sink_records(
                q, window, wi, comp, ci, sink, D ** -0.5)))
        finally:
            tri.DV_SPLIT = old
    _record(f"sparse_attention_sink_records N={n}", _rel(out, want), ATTN_TOL, times[0],
            f"DV_SPLIT=2 {times[0]:.3f} ms, =4 {times[1]:.3f} ms")


@pytest.mark.parametrize("kernel", ["triton", "pairs"])  # the prefill launch's two kernels
@pytest.mark.parametrize("n", [64, 1024])  # 1024: a prefill-sized launch (contiguous halves)
def test_sparse_attention_bf16_rows(n, kernel, monkeypatch):
    from deepinfer.kernels.triton import attention as tri

    if kernel != "triton" and n <= tri.PREFILL_MIN_QUERIES:
        pytest.skip("decode-sized launches never take the Gluon prefill kernel")
    monkeypatch.setattr(tri, "PREFILL_KERNEL", kernel)
    q = torch.randn(n, H, D, device="cuda").to(torch.bfloat16)
    kv = torch.randn(4096, D, device="cuda").to(torch.bfloat16)
    idx = torch.randint(-1, 4096, (n, W + TOPK), device="cuda")
    idx[0] = -1  # no valid row -> exactly 0
    idx[1, 37:] = -1  # one valid chunk, then whole chunks of -1
    idx[2, :600] = -1  # valid rows only in the last chunk (part of it)
    sink = torch.randn(H, device="cuda")
    out = tri.sparse_attention_sink(q, kv, idx, sink, D ** -0.5)
    want = ref_attn.sparse_attention_sink(q, kv, idx, sink, D ** -0.5)
    assert bool((out[0] == 0).all())
    ms = _time_ms(lambda: tri.sparse_attention_sink(q, kv, idx, sink, D ** -0.5))
    _record(f"sparse_attention_sink bf16 rows N={n} {kernel}", _rel(out, want), ATTN_TOL, ms)


@pytest.mark.parametrize("heads,dim,width", [(96, 512, 640), (64, 512, 64), (64, 512, 20),
                                             (64, 256, 200), (8, 512, 130), (64, 128, 33),
                                             (8, 64, 100), (64, 64, 300)])
def test_sparse_attention_pairs_other_shapes(heads, dim, width):
    """``attention_prefill_pairs`` (session 44: the math warpgroups on chunks of their own) at
    head counts of one block, a masked block and two blocks, heads of 64 / 128 / 256 / 512
    channels (8-byte row copies at 64), lists of one chunk, part of one, an odd chunk count
    (the last pair's chunk b past the list) and ending mid-chunk, int32 row lists, against the
    reference."""
    from deepinfer.kernels.triton import attention_prefill_pairs as app

    assert app.MIN_HEAD_DIM <= min(dim, 64)  # every shape here takes the pairs kernel
    n = 300
    q = torch.randn(n, heads, dim, device="cuda").to(torch.bfloat16)
    kv = torch.randn(2000, dim, device="cuda").to(torch.bfloat16)
    idx = torch.randint(-1, 2000, (n, width), device="cuda", dtype=torch.int32)
    idx[3] = -1  # no valid row: zeros
    if width > 64:
        idx[4, :64] = -1  # chunk a of the first pair empty, b valid (warpgroup 0 without a max)
    sink = torch.randn(heads, device="cuda")
    assert app.accepts(q, kv, idx)
    out = torch.full_like(q, float("nan"))
    app.sparse_attention_sink_pairs(q, kv, idx, sink, dim ** -0.5, out)
    want = ref_attn.sparse_attention_sink(q, kv, idx.long(), sink, dim ** -0.5)
    assert bool((out[3] == 0).all())
    _record(f"attention_prefill_pairs H={heads} D={dim} K={width}", _rel(out, want), ATTN_TOL,
            0.0)


def test_sparse_attention_pairs_row_counts():
    """``attention_prefill_pairs`` with ``row_counts`` on a 4K prompt's lists (the window,
    then picks that end in -1 padding for the early queries: causal, query n sees n // 2
    entries at ratio 2, capped at 512): the bits of the call without counts (the chunks
    past a count are all -1: a factor of exactly 1 and a sum of 0), cut counts against the
    reference; timed against the call without counts (the pairs past each count not run)."""
    from deepinfer.kernels.triton import attention_prefill_pairs as app

    n, m = 4096, 2048 + 4096
    q = torch.randn(n, H, D, device="cuda").to(torch.bfloat16)
    kv = torch.randn(m, D, device="cuda").to(torch.bfloat16)
    pos = torch.arange(n, device="cuda")
    window = pos[:, None] - W + 1 + torch.arange(W, device="cuda")[None, :]
    window = torch.where(window >= 0, window, -1)
    picks = torch.arange(TOPK, device="cuda")[None, :].expand(n, TOPK)
    seen = torch.clamp((pos + 1) // 2, max=TOPK)
    picks = torch.where(picks < seen[:, None], 4096 + picks * 3 % 2048, -1)
    idx = torch.cat([window, picks], 1).to(torch.int32)
    counts = torch.where(idx >= 0, torch.arange(1, W + TOPK + 1, device="cuda"), 0).amax(1)
    counts = counts.to(torch.int32)
    sink = torch.randn(H, device="cuda")
    full, got = torch.empty_like(q), torch.empty_like(q)
    app.sparse_attention_sink_pairs(q, kv, idx, sink, D ** -0.5, full)
    app.sparse_attention_sink_pairs(q, kv, idx, sink, D ** -0.5, got, counts)
    assert torch.equal(got, full)
    cut = counts.clone()
    cut[::7] = torch.randint(0, W + TOPK, cut[::7].shape, device="cuda", dtype=torch.int32)
    cut[5] = 0
    app.sparse_attention_sink_pairs(q, kv, idx, sink, D ** -0.5, got, cut)
    want = ref_attn.sparse_attention_sink(q[::64], kv, idx[::64].long(), sink, D ** -0.5,
                                          row_counts=cut[::64])
    err = _rel(got[::64], want)
    assert bool((got[5] == 0).all())
    ms = _time_ms(lambda: app.sparse_attention_sink_pairs(q, kv, idx, sink, D ** -0.5, got,
                                                          counts))
    ms_all = _time_ms(lambda: app.sparse_attention_sink_pairs(q, kv, idx, sink, D ** -0.5,
                                                              full))
    _record(f"attention_prefill_pairs row counts N={n}", err, ATTN_TOL, ms,
            f"without counts {ms_all:.3f} ms")


def _freq(dev):
    return rope.rope_inv_freq(64, 160000.0, rope.Yarn(16.0, 65536, 32.0, 1.0)).to(dev)


def _records_err(got, want, unpack, d):
    bad = float((got != want).float().mean())
    return _rel(unpack(got, d, torch.float32), unpack(want, d, torch.float32)), bad


# Records: quantizers are exact; torch's CUDA rsqrt/sin/cos and the kernel's libdevice ones may
# differ by an ulp, which flips a code only next to a rounding boundary: <= 1e-3 of the bytes,
# and the dequantized rows within 1e-2 relative (an FP8 code step is ~6%, FP4 up to 33%, rare).
REC_TOL, BYTE_TOL = 1e-2, 1e-3


def test_window_kv_records_and_ring():
    from deepinfer.kernels.triton import cache_write as tri

    n, dev = 4096, "cuda"
    x = (torch.randn(n, D, device=dev) * 3).to(torch.bfloat16)
    w = (torch.rand(D, device=dev) + 0.5).to(torch.bfloat16)
    pos = torch.arange(1000, 1000 + n, device=dev)
    f = _freq(dev)
    got = tri.window_kv_records(x, w, 1e-20, pos, f)
    want = ref_fused.window_kv_records(x, w, 1e-20, pos, f)
    err, bad = _records_err(got, want, formats.unpack_window_kv, D)
    ms = _time_ms(lambda: tri.window_kv_records(x, w, 1e-20, pos, f))
    _record("window_kv_records N=4096", err, REC_TOL, ms, f"bytes differing {bad:.1e}")
    assert bad <= BYTE_TOL
    ring = torch.full((W, formats.window_record_bytes(D)), 0xFF, dtype=torch.uint8, device=dev)
    got_ring = tri.write_window_kv(x, w, 1e-20, pos, f, ring.clone())
    want_ring = ref_fused.write_window_kv(x, w, 1e-20, pos, f, ring.clone())
    err, bad = _records_err(got_ring, want_ring, formats.unpack_window_kv, D)
    _record("write_window_kv ring W=128", err, REC_TOL, 0.0, f"bytes differing {bad:.1e}")
    assert bad <= BYTE_TOL


def test_compressed_and_index_key_records():
    from deepinfer.kernels.triton import cache_write as tri

    g, dev = 4096, "cuda"
    f = _freq(dev)
    pos = torch.arange(g, device=dev) * 2
    lat = torch.randn(g, D, device=dev).to(torch.bfloat16)
    got = tri.compressed_kv_records(lat, pos, f)
    want = ref_fused.compressed_kv_records(lat, pos, f)
    err, bad = _records_err(got, want, formats.unpack_compressed_kv, D)
    ms = _time_ms(lambda: tri.compressed_kv_records(lat, pos, f))
    _record("compressed_kv_records G=4096", err, REC_TOL, ms, f"bytes differing {bad:.1e}")
    assert bad <= BYTE_TOL
    xk = torch.randn(g, DI, device=dev).to(torch.bfloat16)
    wk = (torch.rand(DI, device=dev) + 0.5).to(torch.bfloat16)
    got = tri.index_key_records(xk, wk, 1e-20, pos, f)
    want = ref_fused.index_key_records(xk, wk, 1e-20, pos, f)
    err, bad = _records_err(got, want, formats.unpack_index_key, DI)
    ms = _time_ms(lambda: tri.index_key_records(xk, wk, 1e-20, pos, f))
    _record("index_key_records G=4096", err, REC_TOL, ms, f"bytes differing {bad:.1e}")
    assert bad <= BYTE_TOL


# Index scores: products of FP4-grid values are exact in bf16 x bf16 -> fp32; only the fp32
# accumulation order differs from the fp64 reference: 1e-5 relative.
SCORE_TOL = 1e-5


def test_index_scores():
    from deepinfer.kernels.triton import indexer as tri

    n, t, dev = 64, 65536, "cuda"
    q = quant.fake_quant_fp4_ue8m0_block32(torch.randn(n, HI, DI, device=dev)).to(torch.bfloat16)
    w = torch.randn(n, HI, device=dev) * (DI ** -0.5) * (HI ** -0.5)
    keys = formats.pack_index_key(torch.randn(t, DI, device=dev))
    keys_bf16 = formats.unpack_index_key(keys, DI, torch.float32).to(torch.bfloat16)
    got = tri.index_scores(q, w, keys_bf16)
    want = ref_idx.index_scores(q, w, keys_bf16)
    ms = _time_ms(lambda: tri.index_scores(q, w, keys_bf16))
    _record("index_scores bf16 keys N=64 T=65536", _rel(got, want), SCORE_TOL, ms)


@pytest.mark.parametrize("ratio", [2, 1])
def test_index_scores_causal_prefill(ratio):
    """A 4K prompt's scores at ratio 2 / 1 (4,096 queries x 2,048 / 4,096 keys) with each
    query's visible count (session 31): -inf exactly beyond it, the unmasked kernel's bits
    where visible, and the time against the unmasked kernel plus torch's mask (the wiring
    before; ~half the tiles are unscored now)."""
    from deepinfer.kernels.triton import indexer as tri

    n, dev = 4096, "cuda"
    t = n // ratio
    q = quant.fake_quant_fp4_ue8m0_block32(torch.randn(n, HI, DI, device=dev)).to(torch.bfloat16)
    w = torch.randn(n, HI, device=dev) * (DI ** -0.5) * (HI ** -0.5)
    keys = quant.fake_quant_fp4_ue8m0_block32(torch.randn(t, DI, device=dev)).to(torch.bfloat16)
    vis = torch.div(torch.arange(n, device=dev) + 1, ratio, rounding_mode="floor")
    got = tri.index_scores(q, w, keys, vis)
    full = tri.index_scores(q, w, keys)
    invisible = torch.arange(t, device=dev)[None, :] >= vis[:, None]
    assert torch.equal(torch.isneginf(got), invisible)
    assert torch.equal(got[~invisible], full[~invisible])
    want = ref_idx.mask_invisible(ref_idx.index_scores(q, w, keys), vis)
    ms = _time_ms(lambda: tri.index_scores(q, w, keys, vis))
    ms_before = _time_ms(lambda: ref_idx.mask_invisible(tri.index_scores(q, w, keys), vis))
    _record(f"index_scores causal N={n} T={t}", _rel(got, want), SCORE_TOL, ms,
            f"unmasked + torch mask {ms_before:.3f} ms")



def _paged_index_inputs(n: int, hi: int, width: int, epb: int, dev: str):
    """Shuffled paged pool of index keys, random visible counts (0, 1 and width forced), block
    tables whose unused columns hold 10**9 and unused pool rows (whole blocks and the tails of
    last blocks) NaN scales: a read of either fails the comparison. Returns q, w, pool, the
    tables before and after the garbage, vis."""
    q = quant.fake_quant_fp4_ue8m0_block32(torch.randn(n, hi, DI, device=dev)).to(torch.bfloat16)
    w = torch.randn(n, hi, device=dev) * (DI ** -0.5) * (hi ** -0.5)
    mb = width // epb
    num_blocks = n * mb + 5
    pool = formats.pack_index_key(torch.randn(num_blocks * epb, DI, device=dev))
    tables = torch.randperm(num_blocks, device=dev)[: n * mb].view(n, mb)
    vis = torch.randint(0, width + 1, (n,), device=dev)
    vis[:3] = torch.tensor([0, 1, width], device=dev)
    t = torch.arange(width, device=dev)
    visible = t[None, :] < vis[:, None]
    rows = tables.gather(1, torch.where(visible, t // epb, 0)) * epb + t % epb
    used = torch.zeros(num_blocks * epb, dtype=torch.bool, device=dev)
    used[rows[visible]] = True
    pool[~used, DI // 2:] = 255
    garbage = tables.masked_fill(torch.arange(mb, device=dev)[None, :] * epb >= vis[:, None],
                                 10**9)
    return q, w, pool, tables, garbage, vis


@pytest.mark.parametrize("epb,kernel", [(16, "v2"), (32, "v2"), (16, "gl"), (32, "gl")])
def test_index_scores_paged(epb, kernel, monkeypatch):
    """Released decode shape: 64 rows, 64 index heads x 128, static width 16384. Same arithmetic
    as index_scores (exact bf16 products, fp32 sums vs fp64), so SCORE_TOL; the -inf
    pattern (t >= num_visible) must match exactly (``_rel`` returns inf otherwise)."""
    from deepinfer.kernels.triton import indexer as tri

    monkeypatch.setattr(tri, "PAGED_KERNEL", kernel)
    n, hi, width, dev = 64, 64, 16384, "cuda"
    q, w, pool, clean, tables, vis = _paged_index_inputs(n, hi, width, epb, dev)
    got = tri.index_scores_paged(q, w, pool, tables, vis, epb, width)
    want = ref_fused.index_scores_paged(q, w, pool, tables, vis, epb, width)
    assert torch.equal(torch.isfinite(got),
                       torch.arange(width, device=dev)[None, :] < vis[:, None])
    ms = _time_ms(lambda: tri.index_scores_paged(q, w, pool, tables, vis, epb, width))
    none = torch.zeros_like(vis)
    ms_none = _time_ms(lambda: tri.index_scores_paged(q, w, pool, tables, none, epb, width))
    full = torch.full_like(vis, width)
    ms_full = _time_ms(lambda: tri.index_scores_paged(q, w, pool, clean, full, epb, width))
    _record(f"index_scores_paged {kernel} N=64 Hi=64 W=16384 epb={epb}", _rel(got, want),
            SCORE_TOL, ms,
            f"mean visible {float(vis.float().mean()):.0f}; none visible {ms_none:.3f} ms, "
            f"all {ms_full:.3f} ms")


@pytest.mark.parametrize("n,visible", [(64, 1024), (256, 8192)])
def test_index_scores_paged_v2_decode_shapes(n, visible, monkeypatch):
    """Paged scores at the two decode shapes of bench/index_decode.py: 64 rows x 4K context and
    256 x 32K at ratio 4 (1,024 / 8,192 visible of a 32,768-wide row, one row 0 and one 1
    visible), 64 index heads x 128, 64-entry blocks, v2 (the PTX unpack, exact for every scale
    byte) and gl (the Gluon kernel, same PTX) against the reference. Products of
    FP4-grid values are exact in bf16 x bf16 -> fp32 and only the fp32 accumulation order
    differs from the fp64 reference: SCORE_TOL, as index_scores_paged above; the -inf pattern
    must match exactly. Keys are randn * 2^k with k in -20..30 per record, so their ue8m0 scale
    bytes span ~100..160 (past 128)."""
    from deepinfer.kernels.triton import indexer as tri

    hi, width, epb, dev = 64, 32768, 64, "cuda"
    q = quant.fake_quant_fp4_ue8m0_block32(torch.randn(n, hi, DI, device=dev)).to(torch.bfloat16)
    w = torch.randn(n, hi, device=dev) * (DI ** -0.5) * (hi ** -0.5)
    mb = width // epb
    num_blocks = n * (visible // epb) + 3
    keys = torch.randn(num_blocks * epb, DI, device=dev)
    keys = keys * torch.exp2(torch.randint(-20, 31, (num_blocks * epb, 1), device=dev).float())
    pool = formats.pack_index_key(keys)
    scale_bytes = pool[:, DI // 2:]
    assert int(scale_bytes.max()) > 128 and int(scale_bytes.min()) < 110
    tables = torch.full((n, mb), 10**9, dtype=torch.int64, device=dev)
    tables[:, : visible // epb] = torch.randperm(num_blocks, device=dev)[
        : n * (visible // epb)].view(n, -1)
    vis = torch.full((n,), visible, dtype=torch.int64, device=dev)
    vis[:3] = torch.tensor([0, 1, visible - 37], device=dev)
    want = ref_fused.index_scores_paged(q, w, pool, tables, vis, epb, width)
    for kernel in ("v2", "gl"):
        monkeypatch.setattr(tri, "PAGED_KERNEL", kernel)
        got = tri.index_scores_paged(q, w, pool, tables, vis, epb, width)
        ms = _time_ms(lambda: tri.index_scores_paged(q, w, pool, tables, vis, epb, width))
        _record(f"index_scores_paged {kernel} N={n} visible={visible}", _rel(got, want),
                SCORE_TOL, ms, "W=32768 Hi=64 epb=64, scale bytes ~100..160")


def test_topk_and_candidate_blocks():
    """Integer outputs: exact equality required (random fp32 scores: no ties besides -inf)."""
    from deepinfer.kernels.triton import topk as tri

    n, t, dev = 8, 1 << 20, "cuda"
    scores = torch.randn(n, t, device=dev)
    vis = torch.tensor([0, 1, 7, 513, 4096, 100000, t - 1, t], device=dev)
    scores = scores.masked_fill(torch.arange(t, device=dev)[None, :] >= vis[:, None],
                                float("-inf"))
    got = tri.topk_positions(scores, TOPK)
    want = ref_idx.topk_positions(scores.cpu(), TOPK).to(dev)
    ms = _time_ms(lambda: tri.topk_positions(scores, TOPK))
    mism = int((got != want).sum())
    _record("topk_positions N=8 T=1M k=512", float(mism), 0.0, ms, f"{mism} differing ids")
    got = tri.topk_positions(scores, TOPK, vis)  # tiles beyond each row's count skipped
    ms = _time_ms(lambda: tri.topk_positions(scores, TOPK, vis))
    mism = int((got != want).sum())
    _record("topk_positions N=8 T=1M k=512 with num_visible", float(mism), 0.0, ms,
            f"{mism} differing ids")
    got = tri.topk_positions(scores, TOPK, vis, method="radix")  # one program per 1M row
    ms = _time_ms(lambda: tri.topk_positions(scores, TOPK, vis, method="radix"), reps=3)
    mism = int((got != want).sum())
    _record("topk_positions radix N=8 T=1M k=512", float(mism), 0.0, ms,
            f"{mism} differing ids")
    got = tri.select_candidate_blocks(scores, vis, 2048, 8)
    want = ref_idx.select_candidate_blocks(scores.cpu(), vis.cpu(), 2048, 8).to(dev)
    ms = _time_ms(lambda: tri.select_candidate_blocks(scores, vis, 2048, 8))
    mism = int((got != want).sum())
    _record("select_candidate_blocks N=8 T=1M 2048x8", float(mism), 0.0, ms,
            f"{mism} differing mask entries")


@pytest.mark.parametrize("ratio,ties", [(2, True), (2, False), (1, False)])
def test_topk_positions_causal_prefill(ratio, ties):
    """A 4K prompt's top-k at ratio 2 / 1 (4,096 rows x 2,048 / 4,096 scores, query n sees
    (n + 1) // ratio): the rows that read at most k = 512 scores skip the select (session 31);
    scores in steps of 1/4 (the k-th tied: the bisection's 32 steps) or distinct (its early
    stop). The radix, bisect and auto (bisect at these rows) paths equal the reference exactly,
    timed."""
    from deepinfer.kernels.triton import topk as tri

    n, dev = 4096, "cuda"
    t = n // ratio
    scores = torch.randn(n, t, device=dev)
    scores = (scores * 4).round() / 4 if ties else scores
    vis = (torch.arange(n, device=dev) + 1) // ratio
    scores = scores.masked_fill(torch.arange(t, device=dev)[None, :] >= vis[:, None],
                                float("-inf"))
    want = ref_idx.topk_positions(scores.cpu(), TOPK).to(dev)
    for method in ("radix", "bisect", "auto"):
        got = tri.topk_positions(scores, TOPK, vis, method=method)
        ms = _time_ms(lambda method=method: tri.topk_positions(scores, TOPK, vis,
                                                               method=method))
        mism = int((got != want).sum())
        _record(f"topk_positions {method} causal N={n} T={t} k=512"
                f"{' ties' if ties else ''}", float(mism), 0.0, ms, f"{mism} differing ids")


@pytest.mark.parametrize("n,t", [(64, 1024), (256, 8192), (5, 40000)])
def test_topk_positions_decode_shapes_both_methods(n, t):
    """Decode shapes (4K / 32K context at ratio 4; a row of several radix tiles): scores in
    steps of 1/4 (the k-th score tied across many positions), per-row num_visible incl. 0, fewer
    than k and all; stage and radix paths both equal the reference exactly."""
    from deepinfer.kernels.triton import topk as tri

    dev = "cuda"
    scores = (torch.randn(n, t, device=dev) * 4).round() / 4
    vis = torch.randint(0, t + 1, (n,), device=dev)
    vis[:3] = torch.tensor([0, 300, t], device=dev)
    scores = scores.masked_fill(torch.arange(t, device=dev)[None, :] >= vis[:, None],
                                float("-inf"))
    want = ref_idx.topk_positions(scores.cpu(), TOPK).to(dev)
    for method in ("stage", "radix") + (("bisect",) if t <= 4096 else ()):
        got = tri.topk_positions(scores, TOPK, vis, method=method)
        ms = _time_ms(lambda method=method: tri.topk_positions(scores, TOPK, vis, method=method))
        mism = int((got != want).sum())
        _record(f"topk_positions {method} N={n} T={t} k=512 ties", float(mism), 0.0, ms,
                f"{mism} differing ids")


@pytest.mark.parametrize("n,t", [(64, 65536), (256, 65536)])
def test_select_candidate_blocks_decode_shapes_both_methods(n, t):
    """The decode graph's candidate rows (65,536 wide at ratio 1 in the slice plan: 8,192 blocks
    of 8, 2,048 kept): visible counts 0, 1, a few blocks, fewer blocks than kept (4K context),
    more (32K) and all; scores in steps of 1/4 (tied block maxima). Stage and radix masks both
    equal the reference exactly."""
    from deepinfer.kernels.triton import topk as tri

    dev = "cuda"
    scores = (torch.randn(n, t, device=dev) * 4).round() / 4
    vis = torch.randint(0, t + 1, (n,), device=dev)
    vis[:6] = torch.tensor([0, 1, 100, 4096, 32768, t], device=dev)
    scores = scores.masked_fill(torch.arange(t, device=dev)[None, :] >= vis[:, None],
                                float("-inf"))
    want = ref_idx.select_candidate_blocks(scores.cpu(), vis.cpu(), 2048, 8).to(dev)
    for method in ("stage", "radix"):
        got = tri.select_candidate_blocks(scores, vis, 2048, 8, method=method)
        ms = _time_ms(lambda method=method: tri.select_candidate_blocks(scores, vis, 2048, 8,
                                                                        method=method))
        mism = int((got != want).sum())
        _record(f"select_candidate_blocks {method} N={n} T={t} 2048x8 ties", float(mism), 0.0,
                ms, f"{mism} differing mask entries")


# Compressor: fp32 softmax + weighted sum of 2 tokens vs fp32/fp64 reference: 1e-6 relative.
POOL_TOL = 1e-6


def test_compress_pool():
    from deepinfer.kernels.triton import compressor as tri

    g, dev = 4096, "cuda"
    kv = torch.randn(g, 2, D, device=dev)
    gate = torch.randn(g, 2, D, device=dev) * 3
    got = tri.compress_pool(kv, gate)
    ms = _time_ms(lambda: tri.compress_pool(kv, gate))
    _record("compress_pool G=4096 r=2", _rel(got, ref_comp.compress_pool(kv, gate)), POOL_TOL,
            ms)
    pk, pg = torch.randn(1, D, device=dev), torch.randn(1, D, device=dev)
    ck, cg = torch.randn(4095, D, device=dev), torch.randn(4095, D, device=dev)
    got = tri.compress_pool_chunk(pk, pg, ck, cg, 2)
    want = ref_comp_fused.compress_pool_chunk(pk, pg, ck, cg, 2)
    _record("compress_pool_chunk P=1 S=4095 r=2", _rel(got, want), POOL_TOL, 0.0)


def test_record_packing_and_unpacking():
    """kernels/triton/records.py on the GPU at the released shapes: every byte value unpacked
    as the CPU reference does (bit patterns, NaNs in place), 4K rows packed byte for byte."""
    from deepinfer.kernels.triton import records

    g = torch.Generator().manual_seed(24)
    for name, d, nbytes in (("window", D, formats.window_record_bytes(D)),
                            ("compressed", D, formats.compressed_record_bytes(D)),
                            ("index_key", DI, formats.index_key_record_bytes(DI))):
        rec = torch.randint(0, 256, (4099, nbytes), generator=g, dtype=torch.uint8)
        rec[:, :256] = torch.arange(256, dtype=torch.uint8)[:nbytes]
        want = getattr(formats, f"unpack_{name}" + ("_kv" if name != "index_key" else ""))(
            rec, d, torch.bfloat16)
        fn = getattr(records, f"unpack_{name}" + ("_kv" if name != "index_key" else ""))
        got = fn(rec.cuda(), d, torch.bfloat16).cpu()
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan), name
        assert torch.equal(got.masked_fill(nan, 0).view(torch.int16),
                           want.masked_fill(nan, 0).view(torch.int16)), name
    x = torch.randn(4099, D, generator=g) * torch.exp(torch.randn(4099, 1, generator=g) * 4)
    x = x.to(torch.bfloat16)
    got = records.pack_window_kv(x.cuda()).cpu()
    assert torch.equal(got, formats.pack_window_kv(x))
