"""Triton indexer scores and top-k (kernels/triton/indexer.py, topk.py) against the reference.

Scores: fp32 q/keys on the FP4 grid; the kernel sums the 128-deep dot and the heads in fp32 in a
different order than the fp64 reference, so atol/rtol 1e-5 (fp32 rounding of ~1e2-sized sums of
exact products). fp16 q: products are exact (FP4 grid), accumulation fp32: same tolerance.
Visibility (-inf) must match exactly.

Paged scores: each query over its own entries of a shuffled paged pool, block-table columns past
the visible entries holding 10**9 and unused pool rows NaN scales (reading either fails); v2 at
small tiles so rows span several programs, some of which see no visible entry (the -inf-only path).

Top-k and candidate blocks: exact equality (integer outputs), on scores with many exact ties
(rounded to integers, -0.0, -inf rows) so the tie rule (lower position wins) is exercised; tiny
stage tiles (TOPK_TILE=16) force several merge stages; the radix path (topk_radix.py) both with
rows of several 16-score tiles and with one tile kept in registers, on rows built for its corner
cases (+inf, extreme and subnormal values, constant rows, k > T, per-row num_visible).
"""

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from deepinfer.kernels import formats  # noqa: E402
from deepinfer.kernels.reference import attention_fused as ref_fused  # noqa: E402
from deepinfer.kernels.reference import indexer as ref  # noqa: E402
from deepinfer.kernels.reference import quant  # noqa: E402
from deepinfer.kernels.triton import indexer as tri  # noqa: E402
from deepinfer.kernels.triton import topk as tri_topk  # noqa: E402
from deepinfer.kernels.triton import topk_bisect as tri_topk_bisect  # noqa: E402
from deepinfer.kernels.triton import topk_radix as tri_topk_radix  # noqa: E402


def _inputs(gen, n=5, hi=8, d=32, t=70, dtype=torch.float32):
    q = quant.fake_quant_fp4_ue8m0_block32(torch.randn(n, hi, d, generator=gen)).to(dtype)
    w = torch.randn(n, hi, generator=gen)
    keys = torch.randn(t, d, generator=gen) * 2
    return q, w, keys


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_index_scores_matches_reference(dtype):
    q, w, keys = _inputs(torch.Generator().manual_seed(7), dtype=dtype)
    keys = quant.fake_quant_fp4_ue8m0_block32(keys).to(dtype)
    got = tri.index_scores(q, w, keys)
    torch.testing.assert_close(got, ref.index_scores(q, w, keys), atol=1e-5, rtol=1e-5)


def test_index_scores_keys_m_released_shape():
    """The keys-on-M kernel at the released 32 x 128 over 1,100 keys (a partial last tile and
    key range) for 9 queries (a partial query block of QUERIES): the reference's values up to
    fp32 summation order (the head sum runs along N here)."""
    from deepinfer.kernels.triton import index_scores_keys_m as keys_m

    q, w, keys = _inputs(torch.Generator().manual_seed(19), n=9, hi=32, d=128, t=1100)
    keys = quant.fake_quant_fp4_ue8m0_block32(keys)
    assert 9 % keys_m.QUERIES and 1100 % (keys_m.KEYS * keys_m.KEY_TILES)
    got = keys_m.index_scores(q, w, keys, torch.empty(9, 1100))
    torch.testing.assert_close(got, ref.index_scores(q, w, keys), atol=1e-4, rtol=1e-5)


# the prefill's float keys with each query's visible count: 4 heads and the released 32 x 128;
# 1,100 keys = two key ranges of the keys-on-M kernel (KEY_TILES tiles of KEYS), so whole tiles
# and whole programs lie beyond every query of a block (written -inf, never scored) next to
# partly visible ones; the causal counts of a ratio-2 prompt and some at the edges
@pytest.mark.parametrize("hi,d", [(4, 32), (32, 128)])
def test_index_scores_float_keys_visibility(hi, d):
    t = 1100
    q, w, keys = _inputs(torch.Generator().manual_seed(10), n=40, hi=hi, d=d, t=t)
    keys = quant.fake_quant_fp4_ue8m0_block32(keys)
    vis = torch.div(torch.arange(40) * 55 + 1, 2, rounding_mode="floor")  # 0 .. 1072
    vis[:4] = torch.tensor([0, 1, 128, 129])
    vis[-4:] = torch.tensor([t, t - 1, 1024, 1025])
    got = tri.index_scores(q, w, keys, vis)
    want = ref.index_scores(q, w, keys, vis)
    assert torch.equal(torch.isneginf(got), torch.arange(t)[None, :] >= vis[:, None])
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
    # where visible, the scores of the unmasked op
    full = tri.index_scores(q, w, keys)
    seen = ~torch.isneginf(got)
    assert torch.equal(got[seen], full[seen])


def _paged_inputs(gen, hi, d, epb, width, vis, scale_bytes=None):
    """Paged pool inputs; ``scale_bytes`` (lo, hi): the used records' ue8m0 bytes drawn from
    [lo, hi] instead of the quantizer's (keys' scales then span 2^(lo-127)..2^(hi-127))."""
    q, w, _ = _inputs(gen, n=len(vis), hi=hi, d=d, t=0)
    mb = -(-width // epb) + 1
    num_blocks = len(vis) * mb + 3
    pool = formats.pack_index_key(torch.randn(num_blocks * epb, d, generator=gen) * 2)
    if scale_bytes is not None:
        lo, top = scale_bytes
        pool[:, d // 2:] = torch.randint(lo, top + 1, (pool.shape[0], d // 32), generator=gen,
                                         dtype=torch.uint8)
    tables = torch.randperm(num_blocks, generator=gen)[: len(vis) * mb].view(len(vis), mb)
    used = torch.zeros(num_blocks * epb, dtype=torch.bool)
    for i, v in enumerate(vis):
        v = min(v, width)
        t = torch.arange(v)
        used[tables[i, t // epb] * epb + t % epb] = True
        tables[i, -(-v // epb):] = 10**9  # never read
    pool[~used, d // 2:] = 255  # NaN scale: never read
    return q, w, pool, tables, torch.tensor(vis, dtype=torch.int64)


def _check_paged(q, w, pool, tables, vis_t, epb, width):
    """Kernel == reference up to fp32 summation order: products are exact, so a score's error is
    at most (D + Hi) * 2^-24 (D-term dots, then Hi heads) times the same score over |q|, |w|,
    |k| (the pool with its e2m1 sign bits cleared); 2e-5 of that allowed, -inf exactly."""
    d = q.shape[-1]
    got = tri.index_scores_paged(q, w, pool, tables, vis_t, epb, width)
    want = ref_fused.index_scores_paged(q, w, pool, tables, vis_t, epb, width)
    unsigned = pool.clone()
    unsigned[:, : d // 2] &= 0x77
    bound = ref_fused.index_scores_paged(q.abs(), w.abs(), unsigned, tables, vis_t, epb, width)
    assert got.shape == want.shape == (len(vis_t), width)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    visible = torch.arange(width)[None, :] < vis_t[:, None]
    assert torch.equal(torch.isfinite(want), visible)
    assert torch.equal(got[~visible], want[~visible])
    err = (got[visible] - want[visible]).abs()
    assert bool((err <= 2e-5 * bound[visible]).all()), float((err / bound[visible]).max())


@pytest.fixture
def paged_kernel(monkeypatch):
    """Paged kernel v2 at small tiles: 16-entry tiles and 24 programs in all (rows of several
    programs, each of several strided tiles, and programs with no visible tile)."""
    monkeypatch.setattr(tri, "PAGED_KERNEL", "v2")
    monkeypatch.setattr(tri, "PAGED_BLOCK_KEYS", 16)
    monkeypatch.setattr(tri, "PAGED_TARGET_PROGRAMS", 24)
    return "v2"


# Hi 4 (heads padded to 16 dot rows), 16 and the released 64 x 128; 2-, 16- and 64-entry
# blocks; widths that are not multiples of a tile; rows with 0, 1, all and more than width
# visible, and tile-boundary counts.
@pytest.mark.parametrize("hi,d,epb,width,vis", [
    (4, 32, 2, 70, [0, 1, 70, 75, 33]),
    (64, 128, 16, 600, [0, 1, 600, 257, 40]),
    (4, 32, 16, 300, [256, 300, 129, 0]),
    (16, 64, 64, 200, [200, 48, 17, 0, 199]),
])
def test_index_scores_paged_matches_reference(paged_kernel, hi, d, epb, width, vis):
    _check_paged(*_paged_inputs(torch.Generator().manual_seed(12), hi, d, epb, width, vis),
                 epb, width)


def test_index_scores_paged_scale_bytes_span(paged_kernel):
    """Scale bytes 100..160 (scales 2^-27..2^33: past the one-multiply unpack's <= 128 range,
    so v2's exact two-multiply unpack must hold for them), 8 heads, 4-entry blocks."""
    inputs = _paged_inputs(torch.Generator().manual_seed(13), 8, 128, 4, 90, [90, 37, 0, 64],
                           scale_bytes=(100, 160))
    _check_paged(*inputs, 4, 90)


def test_index_scores_paged_v2_grid():
    """v2's programs per row: the target over the rows, at least 1, at most a row's tiles."""
    bk = tri.PAGED_BLOCK_KEYS
    assert tri.paged_programs_per_row(64, 32768, bk) == -(-tri.PAGED_TARGET_PROGRAMS // 64)
    assert tri.paged_programs_per_row(10**6, 32768, bk) == 1
    assert tri.paged_programs_per_row(1, 3 * bk - 1, bk) == 3


def _tied_scores(gen, n=4, t=50):
    s = torch.randn(n, t, generator=gen).round()
    s[0] = float("-inf")
    s[0, 3] = 1.0  # one finite pick only
    s[1, 40:] = float("-inf")
    s[2, ::3] = -0.0
    return s


@pytest.fixture
def small_tiles(monkeypatch):
    monkeypatch.setattr(tri_topk, "TOPK_TILE", 16)
    monkeypatch.setattr(tri_topk_radix, "RADIX_TILE", 16)


@pytest.mark.parametrize("method", ["stage", "radix"])
@pytest.mark.parametrize("k", [8, 5, 64])
def test_topk_positions_matches_reference(small_tiles, k, method):
    s = _tied_scores(torch.Generator().manual_seed(9))
    assert torch.equal(tri_topk.topk_positions(s, k, method=method), ref.topk_positions(s, k))


@pytest.mark.parametrize("method", ["stage", "radix"])
@pytest.mark.parametrize("k", [8, 64])
def test_topk_positions_skips_tiles_beyond_the_visible_count(small_tiles, k, method):
    """num_visible: stage-0 tiles at or beyond a row's count are not sorted (pad keys instead),
    radix passes stop at it; the positions equal the reference's, with or without the hint
    (rows: none visible, fewer than k, a tile boundary, all)."""
    g = torch.Generator().manual_seed(13)
    t = 200  # 13 tiles of 16 at this test's tile size: several stages
    vis = torch.tensor([0, 5, 32, 150, t])
    s = torch.randn(len(vis), t, generator=g).round()
    s = s.masked_fill(torch.arange(t)[None, :] >= vis[:, None], float("-inf"))
    want = ref.topk_positions(s, k)
    assert torch.equal(tri_topk.topk_positions(s, k, vis, method=method), want)
    assert torch.equal(tri_topk.topk_positions(s, k, method=method), want)
    assert torch.equal(ref.topk_positions(s, k, vis), want)
    strided = torch.stack([vis, -vis], dim=1)[:, 0]  # a column of a wider buffer
    assert torch.equal(tri_topk.topk_positions(s, k, strided, method=method), want)


def _radix_scores(gen, t=70):
    """Rows that exercise every branch of the radix select (t not a multiple of 16): distinct
    values, a few values (ties across the threshold), -0.0 next to +0.0, a -inf tail, none
    finite, fewer finite than most k, +inf and the extreme finite and subnormal values (keys
    differing only in low digits), and a constant row (every digit pass ties)."""
    n = 8
    s = torch.randn(n, t, generator=gen)
    s[1] = torch.randint(-2, 3, (t,), generator=gen).float()  # 5 values
    s[2] = torch.randint(-1, 2, (t,), generator=gen).float()
    s[2, ::4] = -0.0
    s[3, 30:] = float("-inf")
    s[4] = float("-inf")
    s[5] = float("-inf")
    s[5, [2, 40, 69]] = torch.tensor([0.5, -3.0, 0.5])
    tiny = torch.finfo(torch.float32).tiny
    s[6, :12] = torch.tensor([float("inf"), -3.4e38, 3.4e38, tiny, -tiny, tiny / 4, -tiny / 4,
                              1.0, 1.0 + 2**-23, 1.0 - 2**-24, float("inf"), -3.4e38])
    s[7] = 1.5
    return s


@pytest.mark.parametrize("tile", [32, 4096])  # several tiles per row / one tile in registers
def test_topk_positions_radix_matches_reference(monkeypatch, tile):
    """Radix select + ordered compaction == the reference exactly: ties to the lower position,
    -1s after the finite picks, k > T, and per-row num_visible (larger finite scores placed at
    and beyond it must not be read)."""
    monkeypatch.setattr(tri_topk_radix, "RADIX_TILE", tile)
    t = 70
    s = _radix_scores(torch.Generator().manual_seed(21), t)
    vis = torch.tensor([t, 33, t, 20, 0, t, 16, 41])
    hidden = torch.arange(t)[None, :] >= vis[:, None]
    masked = s.masked_fill(hidden, float("-inf"))
    beyond = s.masked_fill(hidden, 1e30)  # what a read past num_visible would pick
    for k in (1, 16, 40, t + 6):
        want = ref.topk_positions(s, k)
        assert torch.equal(tri_topk_radix.topk_positions_radix(s, k), want), k
        want = ref.topk_positions(masked, k)
        assert torch.equal(tri_topk_radix.topk_positions_radix(beyond, k, vis), want), k


def test_topk_positions_bisect_matches_reference():
    """The bisection select + the same compaction == the reference exactly on the radix test's
    rows (ties across the threshold, -0.0 / +0.0, -inf tails, none finite, +inf, subnormals, a
    constant row: the bisection runs all 32 steps; distinct rows stop early), with and without
    num_visible (larger scores past it must not be read), k from 1 to past T."""
    t = 70
    s = _radix_scores(torch.Generator().manual_seed(21), t)
    vis = torch.tensor([t, 33, t, 20, 0, t, 16, 41])
    hidden = torch.arange(t)[None, :] >= vis[:, None]
    masked = s.masked_fill(hidden, float("-inf"))
    beyond = s.masked_fill(hidden, 1e30)
    for k in (1, 16, 40, t + 6):
        want = ref.topk_positions(s, k)
        assert torch.equal(tri_topk_bisect.topk_positions_bisect(s, k), want), k
        want = ref.topk_positions(masked, k)
        assert torch.equal(tri_topk_bisect.topk_positions_bisect(beyond, k, vis), want), k


def test_topk_bisect_causal_rows_and_routing(monkeypatch):
    """A prefill's causal rows (query n sees (n + 1) // 2 scores; early rows read fewer than k)
    in steps of 1/4 (the k-th score tied across positions) and distinct: method="auto" takes the
    bisect kernel from MIN_ROWS rows up (the radix one below), and both equal the reference;
    rows longer than MAX_ENTRIES are refused by the launch, never routed there."""
    g = torch.Generator().manual_seed(23)
    n, t = 48, 24
    vis = (torch.arange(n) + 1) // 2
    used = []
    real = tri_topk_bisect.topk_positions_bisect
    monkeypatch.setattr(tri_topk_bisect, "topk_positions_bisect",
                        lambda *a: used.append("bisect") or real(*a))
    for s in ((torch.randn(n, t, generator=g) * 4).round() / 4, torch.randn(n, t, generator=g)):
        s = ref.mask_invisible(s, vis)
        for k in (4, 9):
            want = ref.topk_positions(s, k)
            used.clear()
            monkeypatch.setattr(tri_topk_bisect, "MIN_ROWS", n)
            assert torch.equal(tri_topk.topk_positions(s, k, vis), want)
            monkeypatch.setattr(tri_topk_bisect, "MIN_ROWS", n + 1)
            assert torch.equal(tri_topk.topk_positions(s, k, vis), want)
            assert used == ["bisect"]
    assert tri_topk_bisect.takes(tri_topk_bisect.MIN_ROWS, tri_topk_bisect.MAX_ENTRIES)
    assert not tri_topk_bisect.takes(tri_topk_bisect.MIN_ROWS, tri_topk_bisect.MAX_ENTRIES + 1)
    with pytest.raises(ValueError, match="at most"):
        tri_topk_bisect.launch_meta(tri_topk_bisect.MAX_ENTRIES + 1, True)


def test_topk_positions_auto_picks_radix_for_short_rows(monkeypatch):
    """method="auto" is a shape-only choice: rows up to RADIX_MAX_ENTRIES take the radix path."""
    calls = []
    monkeypatch.setattr(tri_topk_radix, "topk_positions_radix",
                        lambda *a: calls.append(a[0].shape[1]) or ref.topk_positions(*a[:2]))
    s = _tied_scores(torch.Generator().manual_seed(9))
    monkeypatch.setattr(tri_topk, "RADIX_MAX_ENTRIES", s.shape[1])
    tri_topk.topk_positions(s, 8)
    monkeypatch.setattr(tri_topk, "RADIX_MAX_ENTRIES", s.shape[1] - 1)
    monkeypatch.setattr(tri_topk, "TOPK_TILE", 16)
    assert torch.equal(tri_topk.topk_positions(s, 8), ref.topk_positions(s, 8))
    assert calls == [s.shape[1]]
    with pytest.raises(ValueError, match="method"):
        tri_topk.topk_positions(s, 8, method="sort")


@pytest.mark.parametrize("method", ["stage", "radix"])
def test_select_candidate_blocks_skips_blocks_beyond_the_visible_count(small_tiles, method):
    """Many blocks (several sorting / radix tiles at this test's tile size), rows with none,
    few, a tile's worth and all entries visible, fewer visible blocks than kept ones: the mask
    equals the reference's."""
    g = torch.Generator().manual_seed(14)
    t = 400  # 100 blocks of 4
    vis = torch.tensor([0, 3, 70, 231, t])
    s = ref.mask_invisible(torch.randn(len(vis), t, generator=g), vis)
    for num_blocks in (2, 6, 40):
        got = tri_topk.select_candidate_blocks(s, vis, num_blocks, 4, method=method)
        assert torch.equal(got, ref.select_candidate_blocks(s, vis, num_blocks, 4))


@pytest.mark.parametrize("method", ["stage", "radix"])
@pytest.mark.parametrize("num_blocks", [3, 20])
def test_select_candidate_blocks_matches_reference(small_tiles, num_blocks, method):
    """Tied scores (block maxima tie across blocks: the lower block wins, as stable_topk),
    -0.0 next to +0.0, the newest block pinned, a ragged last block."""
    s = _tied_scores(torch.Generator().manual_seed(10))
    vis = torch.tensor([0, 3, 50, 17])
    s = ref.mask_invisible(s, vis)
    got = tri_topk.select_candidate_blocks(s, vis, num_blocks, 4, method=method)
    assert torch.equal(got, ref.select_candidate_blocks(s, vis, num_blocks, 4))
    strided = torch.stack([vis, -vis], dim=1)[:, 0]  # counts as a column of a wider buffer
    assert torch.equal(tri_topk.select_candidate_blocks(s, strided, num_blocks, 4,
                                                        method=method), got)


def test_select_candidate_blocks_rejects_an_unknown_method():
    s = torch.zeros(1, 8)
    with pytest.raises(ValueError, match="method"):
        tri_topk.select_candidate_blocks(s, torch.tensor([8]), 2, 4, method="sort")


def test_indexer_and_topk_sm90_compile():
    sys.path.insert(0, str(Path(__file__).parent))
    from aot_attention_side import SM90_SHARED_LIMIT, compile_cases

    for area in ("indexer", "topk"):
        for r in compile_cases(area):
            print(r)
            assert r["shared"] < SM90_SHARED_LIMIT, r
            if area == "indexer":
                assert r["wgmma"] > 0, r
                assert r["stack"] in (None, 0), r  # no register spills (v2's key tiles)
                # v2 holds its next tile of records in registers (no cp.async pipeline)
                if "paged v2" in r["name"]:
                    assert r["cp_async"] == 0, r
