"""reference.attention_fused.index_scores_paged against the per-row composition it replaces.

The composition is what ``Indexer.select_rows`` computes for one decode row: gather that row's
visible pool rows, ``unpack_index_key``, ``indexer.index_scores`` of its one query, then
``indexer.mask_invisible``. The vectorised op must give the same bits (both accumulate in fp64
and round once to fp32). Block-table columns past a row's visible entries hold 10**9 and the pool
rows no visible entry uses hold NaN scales (byte 255), so reading either would show.
"""

import pytest
import torch

from deepinfer.kernels import formats, registry
from deepinfer.kernels.reference import attention_fused as ref_fused
from deepinfer.kernels.reference import indexer as ref
from deepinfer.kernels.reference import quant

GARBAGE_BLOCK = 10**9


def paged_inputs(gen, n, hi, d, epb, width, vis, dtype=torch.float32):
    """Random FP4-grid queries, a shuffled paged pool, block tables whose unused columns hold
    GARBAGE_BLOCK, and unused pool rows with NaN scales. Returns q, w, pool, tables, vis."""
    q = quant.fake_quant_fp4_ue8m0_block32(torch.randn(n, hi, d, generator=gen)).to(dtype)
    w = torch.randn(n, hi, generator=gen)
    mb = -(-width // epb) + 1  # one column more than any row can use
    num_blocks = n * mb + 3
    pool = formats.pack_index_key(torch.randn(num_blocks * epb, d, generator=gen) * 2)
    tables = torch.randperm(num_blocks, generator=gen)[: n * mb].view(n, mb).clone()
    used = torch.zeros(num_blocks * epb, dtype=torch.bool)
    for i, v in enumerate(vis):
        v = min(v, width)
        tables[i, -(-v // epb):] = GARBAGE_BLOCK
        for t in range(v):
            used[int(tables[i, t // epb]) * epb + t % epb] = True
    pool[~used, d // 2:] = 255  # NaN scale: an unused row that is read poisons its score
    return q, w, pool, tables, torch.tensor(vis, dtype=torch.int64)


def composed(q, w, pool, tables, vis, epb, width):
    """Row by row: gather the visible rows, unpack, index_scores, mask_invisible."""
    out = []
    for i in range(q.shape[0]):
        v = min(int(vis[i]), width)
        rows = [int(tables[i, t // epb]) * epb + t % epb for t in range(v)]
        keys = formats.unpack_index_key(pool[rows], q.shape[-1])
        row = torch.zeros(1, width)
        row[:, :v] = ref.index_scores(q[i:i + 1], w[i:i + 1], keys)
        out.append(ref.mask_invisible(row, vis[i:i + 1]))
    return torch.cat(out)


@pytest.mark.parametrize("hi,d,epb,width,dtype", [
    (4, 32, 2, 24, torch.float32),
    (64, 128, 16, 80, torch.float32),
    (8, 128, 16, 40, torch.bfloat16),  # q as the GPU gives it
])
def test_reference_equals_per_row_composition(monkeypatch, hi, d, epb, width, dtype):
    monkeypatch.setattr(ref_fused, "PAGED_SCORE_CHUNK", 16)  # several chunks per row
    vis = [0, 1, width, width + 7, 5, width - 1]
    q, w, pool, tables, vis_t = paged_inputs(torch.Generator().manual_seed(11), len(vis), hi,
                                             d, epb, width, vis, dtype)
    got = ref_fused.index_scores_paged(q, w, pool, tables, vis_t, epb, width)
    want = composed(q, w, pool, tables, vis_t, epb, width)
    assert got.dtype == torch.float32 and got.shape == (len(vis), width)
    assert torch.equal(got, want)  # bit for bit, -inf included
    visible = torch.arange(width)[None, :] < vis_t[:, None]
    assert torch.equal(torch.isfinite(got), visible)  # finite exactly where visible (no NaN)


def test_nothing_visible_reads_nothing():
    q = torch.zeros(3, 4, 32)
    w = torch.ones(3, 4)
    pool = torch.empty(0, formats.index_key_record_bytes(32), dtype=torch.uint8)
    tables = torch.empty(3, 0, dtype=torch.int64)
    out = ref_fused.index_scores_paged(q, w, pool, tables, torch.zeros(3, dtype=torch.int64),
                                       16, 10)
    assert out.shape == (3, 10) and bool((out == float("-inf")).all())


def test_registered_as_reference():
    assert registry.resolve("index_scores_paged") is ref_fused.index_scores_paged
