"""The pairs attention's schedule (kernels/triton/attention_prefill_pairs.py) as a small torch
model, on CPU, against the reference ``sparse_attention_sink``.

Gluon has no interpreter, so the kernel itself runs only on the GPU. What a CPU can check is
its algorithm: chunk pairs split between two warpgroups, each with its own S and half of O; the
row max handed from warpgroup 0 (m0) to warpgroup 1 (m1 = max(m0, rowmax S_b)); P_a rescaled by
exp2(m0 - m1) before warpgroup 1 reads it, O_0 and warpgroup 0's sum rescaled the same; each
warpgroup summing its own P; the sums meeting at the end; the sink in the denominator; a
pair's chunk past the list an all-masked chunk; P in bf16 for the p . v products. The model
follows the kernel's operations step by step in fp32 (``_pair0`` / ``_pair1`` / ``_math``),
so a change to the schedule's arithmetic (a lost guard, a rescale in the wrong place) shows
here first.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer.kernels.reference import attention as ref

BK = 64  # rows per chunk (attention_prefill_pairs.BK)
LOG2E = 1.4426950408889634


def _finite(m: torch.Tensor) -> torch.Tensor:
    return torch.where(m == float("-inf"), torch.zeros_like(m), m)


def pairs_model(q: torch.Tensor, kv: torch.Tensor, idx: torch.Tensor, sink: torch.Tensor,
                scale: float, counts: torch.Tensor | None = None,
                beta_guard: bool = True) -> torch.Tensor:
    """The kernel's schedule for q (N, H, D) bf16, kv (M, D) bf16, idx (N, K) (-1: none), sink
    (H,), counts (N,) or None -> (N, H, D) bf16. ``beta_guard`` False drops the guard on P_a's
    rescale for a row with no valid entry yet (a test that it is needed)."""
    n, h, d = q.shape
    half = d // 2
    out = torch.empty_like(q)
    qk_scale = scale * LOG2E
    for i in range(n):
        cnt = idx.shape[1] if counts is None else min(int(counts[i]), idx.shape[1])
        num_pairs = -(-max(cnt, 1) // (2 * BK))
        listed = torch.arange(num_pairs * 2 * BK)
        ids = torch.full((num_pairs * 2 * BK,), -1, dtype=torch.long)
        take = min(idx.shape[1], ids.shape[0])
        ids[:take] = idx[i, :take].long()
        ids = torch.where(listed < cnt, ids, -1)  # the loader's ids: -1 past the count
        rows = kv.float()[ids.clamp(min=0)] * (ids >= 0)[:, None]  # zero-filled copies
        qf = q[i].float()  # (H, D)
        m = torch.full((h,), float("-inf"))
        l0, l1 = torch.zeros(h), torch.zeros(h)
        o0, o1 = torch.zeros(h, half), torch.zeros(h, half)
        for j in range(num_pairs):
            a = slice(2 * j * BK, (2 * j + 1) * BK)
            b = slice((2 * j + 1) * BK, (2 * j + 2) * BK)

            def scores(c, qf=qf, rows=rows, ids=ids):
                s = (qf @ rows[c].T) * qk_scale
                return torch.where((ids[c] >= 0)[None, :], s, float("-inf"))

            # warpgroup 0: chunk a, its softmax first
            s_a = scores(a)
            m0 = torch.maximum(m, s_a.amax(1))
            alpha0 = torch.exp2(m - _finite(m0))
            p_a = torch.exp2(s_a - _finite(m0)[:, None])
            l0 = l0 * alpha0 + p_a.sum(1)
            o0 = o0 * alpha0[:, None] + p_a.bfloat16().float() @ rows[a][:, :half]
            # warpgroup 1: chunk b from m0
            s_b = scores(b)
            m1 = torch.maximum(m0, s_b.amax(1))
            alpha1 = torch.exp2(m - _finite(m1))
            p_b = torch.exp2(s_b - _finite(m1)[:, None])
            l1 = l1 * alpha1 + p_b.sum(1)
            o1 = o1 * alpha1[:, None] + p_b.bfloat16().float() @ rows[b][:, half:]
            # warpgroup 0 rescales P_a, O_0 and its sum to m1, then adds P_b's product
            if beta_guard:  # the kernel's: m1 >= m0, and 1 where m0 is -inf (P_a, O_0, l0 all 0)
                beta = torch.where(m0 == float("-inf"), torch.ones_like(m0),
                                   torch.exp2(m0 - _finite(m1)))
            else:  # both maxes as exponent offsets (0 for -inf), as the first draft had it
                beta = torch.exp2(_finite(m0) - _finite(m1))
            p_a_s = (p_a * beta[:, None]).bfloat16().float()
            o0 = o0 * beta[:, None] + p_b.bfloat16().float() @ rows[b][:, :half]
            l0 = l0 * beta
            # warpgroup 1 adds P_a's (rescaled) product
            o1 = o1 + p_a_s @ rows[a][:, half:]
            m = m1
        lsum = l0 + l1
        inv = 1.0 / (lsum + torch.exp2(sink.float() * LOG2E - _finite(m)))
        out[i] = (torch.cat([o0, o1], 1) * inv[:, None]).bfloat16()
    return out


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.mark.parametrize("width", [20, 64, 130, 300])
def test_schedule_matches_the_reference(width):
    """Lists of part of a chunk, one chunk, an odd chunk count (pair 2's chunk b past the
    list) and five chunks, with -1 entries, a query of no row (zeros) and one whose first
    chunk is all -1: within the GPU tests' tolerance of the reference."""
    g = torch.Generator().manual_seed(width)
    n, h, d, m = 12, 8, 64, 400
    q = torch.randn(n, h, d, generator=g).bfloat16()
    kv = torch.randn(m, d, generator=g).bfloat16()
    idx = torch.randint(-1, m, (n, width), generator=g)
    idx[3] = -1
    idx[4, :min(width, BK)] = -1
    sink = torch.randn(h, generator=g)
    got = pairs_model(q, kv, idx, sink, d ** -0.5)
    want = ref.sparse_attention_sink(q, kv, idx, sink, d ** -0.5)
    assert bool((got[3] == 0).all())
    assert _rel(got, want) < 1e-2, _rel(got, want)


def test_row_counts_give_the_bits_of_the_padded_list():
    """A count that ends the list early runs fewer pairs; the -1 padding past it, when run,
    multiplies by exactly 1 and adds exactly 0: the same bits (the GPU test's claim)."""
    g = torch.Generator().manual_seed(7)
    n, h, d, m, k = 6, 4, 64, 300, 4 * BK
    q = torch.randn(n, h, d, generator=g).bfloat16()
    kv = torch.randn(m, d, generator=g).bfloat16()
    counts = torch.tensor([1, 30, 64, 65, 129, 200])
    idx = torch.randint(0, m, (n, k), generator=g)
    padded = torch.where(torch.arange(k)[None, :] < counts[:, None], idx, -1)
    sink = torch.randn(h, generator=g)
    with_counts = pairs_model(q, kv, padded, sink, d ** -0.5, counts)
    without = pairs_model(q, kv, padded, sink, d ** -0.5)
    assert torch.equal(with_counts, without)
    want = ref.sparse_attention_sink(q, kv, idx, sink, d ** -0.5, row_counts=counts)
    assert _rel(with_counts, want) < 1e-2


def test_the_beta_guard_is_needed():
    """A query whose first chunk a is all -1 and whose scores sit far below 0 in base 2: m0 is
    -inf, m1 ~ -200, so exp2(0 - m1) overflows fp32. P_a, O_0 and warpgroup 0's sum are all 0
    there; without the kernel's guard (beta 1 where m0 is -inf) 0 * inf turns O into NaN."""
    n, h, d, m = 1, 4, 64, 200
    q = torch.full((n, h, d), -4.0).bfloat16()
    kv = torch.full((m, d), 4.0).bfloat16()  # every score -4 * 4 * 64 / 8 = -128 (x log2 e)
    idx = torch.arange(2 * BK)[None, :].clone()
    idx[0, :BK] = -1  # chunk a of the only pair: nothing
    sink = torch.zeros(h)
    guarded = pairs_model(q, kv, idx, sink, d ** -0.5)
    want = ref.sparse_attention_sink(q, kv, idx, sink, d ** -0.5)
    assert bool(torch.isfinite(guarded).all()) and _rel(guarded, want) < 1e-2
    m1 = -128 * LOG2E  # warpgroup 1's max there: exp2(-m1) is past fp32's range
    assert torch.isinf(torch.exp2(torch.tensor(-m1, dtype=torch.float32)))
    unguarded = pairs_model(q, kv, idx, sink, d ** -0.5, beta_guard=False)
    assert bool(torch.isnan(unguarded).any())
