"""Indexer scores of a prefill's float keys with the keys on the MMA's M side (model-spec §2.6):

    score[n, t] = sum_h w[n, h] * relu(q[n, h] . k[t])

The registered ``index_scores`` op on float keys (``indexer.index_scores``: one sequence's index
keys unpacked to bf16 rows, a prompt's queries against them) runs this kernel; the reference is
``reference.indexer.index_scores``.

Why: the rows kernel it replaced (removed in session 42, code at commit ad9ad7b) put a
program's 2 queries x 32 heads on M and 128 keys on N. Every program then streamed its key
range through shared memory for only 2 queries: a 4K prompt at ratio 2 (4,096 queries, 2,048
keys, causal) moved ~0.5 GB of key tiles from L2 for 34 GFLOP (64 FLOP a byte), and the head
sum reduced M rows spread over the 4 warps (shared memory and barriers a tile) — 268 µs a call
on the H200 (3 calls in round 187's 4K prompt, 0.80 ms, 0.27 of its floor); 0.283 ms alone at
that shape on an H100 against 0.134 here (round 192). Here a program holds ``QUERIES`` queries
(N = QUERIES x heads, their q rows loaded once as the B operand) and streams ``KEYS`` keys a
tile as A (M): the key bytes per FLOP fall by QUERIES / 2, and the head sum runs along N — each
thread's accumulator row holds 8 of a query's 32 heads (the wgmma layout: columns 8 j + 2
(lane % 4) + {0, 1}), so it is 7 in-thread adds and 2 shuffles, no shared memory (the reshape
of N into (query, head) is a free linear layout).

The grid is (query blocks, key ranges of ``KEY_TILES`` tiles). With ``num_visible`` a program
scores only the tiles some query of its block sees and writes -inf over the rest (a prompt's
causal upper triangle: about half the work); past each query's count the epilogue writes -inf.
Dots run in q's dtype (bf16 on the GPU: FP4-grid values are exact in bf16) with fp32
accumulation; the head sum is fp32 (another order than the M-side kernel's: equal up to fp32
rounding).

Shapes: q (N, Hi, D) bf16 (or fp32 / fp16: the CPU tests), rows contiguous; w (N, Hi) fp32;
keys (T, D) q's dtype; num_visible (N,) int or None; out (N, T) fp32.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton.launch_math import cdiv

# H100 round 192 (bench/index_prefill.py, 4,096 queries, causal; ms at 2,048 keys ratio 2 /
# 4,096 keys ratio 1; QUERIES:KEYS:KEY_TILES:WARPS:STAGES): 4:128:8:8:3 0.218 / 0.261,
# 4:128:8:8:2 0.163 / 0.277, 4:64:8:4:3 0.142 / 0.251, 8:128:8:8:2 0.145 / 0.239, 2:128:8:8:3
# 0.156 / 0.261, 4:128:4:8:3 0.181 / 0.319, 4:128:16:8:3 0.134 / 0.225 (session 39's default);
# the rows kernel (removed in session 42; its default tiling) 0.283 / 0.357. Another H100,
# round 195-196 (session 40), each twice interleaved: 4:128:16:8:3 0.164-0.165 / 0.247-0.252,
# 4:64:16:4:3 0.154-0.158 / 0.234 (this default; the same output bits), 4:64:32:4:3 0.147 / -,
# 8:128:16:8:2 0.164, 2:64:16:4:3 0.165, 4:64:16:4:4 0.156 at 2,048 keys
QUERIES = 4  # queries per program: N = QUERIES x heads (128 at the released 32 heads)
KEYS = 64  # keys per tile: M (one warpgroup's m64)
KEY_TILES = 16  # tiles per program (its queries stay in shared memory across them)
NUM_WARPS = 4  # one warpgroup
NUM_STAGES = 3  # key tiles in flight (Triton's software pipeline)


@triton.jit
def _scores_keys_m_kernel(
    q_ptr, stride_qn, stride_qh, w_ptr, stride_wn, k_ptr, stride_k, vis_ptr, out_ptr,
    stride_on, num_q, num_keys,
    HI: tl.constexpr, D: tl.constexpr, BQ: tl.constexpr, BT: tl.constexpr, KT: tl.constexpr,
    HAS_VIS: tl.constexpr, PREC: tl.constexpr,
):
    """Program (b, r): queries [b BQ, (b + 1) BQ) over keys [r BT KT, (r + 1) BT KT)."""
    n0 = tl.program_id(0) * BQ
    t0 = tl.program_id(1) * (BT * KT)
    c = tl.arange(0, BQ * HI)  # N: query c // HI, head c % HI
    qc = n0 + c // HI
    d = tl.arange(0, D)
    q = tl.load(q_ptr + qc.to(tl.int64)[:, None] * stride_qn + (c % HI)[:, None] * stride_qh
                + d[None, :], mask=(qc < num_q)[:, None], other=0.0)  # (BQ HI, D)
    w = tl.load(w_ptr + qc.to(tl.int64) * stride_wn + c % HI, mask=qc < num_q,
                other=0.0).to(tl.float32)
    qb = n0 + tl.arange(0, BQ)
    qmask = qb < num_q
    tiles = tl.minimum(KT, tl.cdiv(num_keys - t0, BT))
    scored = tiles
    vis = tl.zeros((BQ,), tl.int32) + num_keys
    if HAS_VIS:
        vis = tl.minimum(tl.load(vis_ptr + qb, mask=qmask, other=0), num_keys).to(tl.int32)
        seen = tl.max(vis, 0)  # tiles no query of the block sees: -inf, not scored
        scored = tl.maximum(tl.minimum(tiles, tl.cdiv(seen - t0, BT)), 0)
        for kt in range(scored, tiles):
            t = t0 + kt * BT + tl.arange(0, BT)
            tl.store(out_ptr + qb.to(tl.int64)[None, :] * stride_on + t[:, None],
                     tl.full((BT, BQ), float("-inf"), tl.float32),
                     mask=qmask[None, :] & (t < num_keys)[:, None])
    for kt in range(0, scored):
        t = t0 + kt * BT + tl.arange(0, BT)
        tmask = t < num_keys
        k = tl.load(k_ptr + t.to(tl.int64)[:, None] * stride_k + d[None, :],
                    mask=tmask[:, None], other=0.0)  # (BT, D)
        s = tl.dot(k.to(q.dtype), tl.trans(q), input_precision=PREC)  # (BT, BQ HI)
        s = tl.maximum(s, 0.0) * w[None, :]
        score = tl.sum(tl.reshape(s, (BT, BQ, HI)), axis=2)  # (BT, BQ)
        score = tl.where(t[:, None] < vis[None, :], score, float("-inf"))
        tl.store(out_ptr + qb.to(tl.int64)[None, :] * stride_on + t[:, None], score,
                 mask=qmask[None, :] & tmask[:, None])


def launch_meta(hi: int, d: int, has_vis: bool,
                q_dtype: torch.dtype = torch.bfloat16) -> dict[str, Any]:
    """Constexprs and launch options (shared with the SM90 compile test); fp32 q keeps fp32
    dots ("ieee", not the GPU's default tf32)."""
    return dict(HI=hi, D=d, BQ=QUERIES, BT=KEYS, KT=KEY_TILES, HAS_VIS=has_vis,
                PREC="ieee" if q_dtype == torch.float32 else "tf32",
                num_warps=NUM_WARPS, num_stages=NUM_STAGES)


def index_scores(q: torch.Tensor, head_weights: torch.Tensor, keys: torch.Tensor,
                 out: torch.Tensor, num_visible: torch.Tensor | None = None) -> torch.Tensor:
    """(N, Hi, D) q, (N, Hi) head weights, (T, D) float keys -> ``out`` (N, T) fp32 filled;
    -inf at t >= num_visible[n]. The caller checks the rows are contiguous (``indexer``)."""
    n, hi, d = q.shape
    num_keys = keys.shape[0]
    meta = launch_meta(hi, d, num_visible is not None, q.dtype)
    grid = (cdiv(n, meta["BQ"]), cdiv(num_keys, meta["BT"] * meta["KT"]))
    vis = num_visible.contiguous() if num_visible is not None else head_weights
    _scores_keys_m_kernel[grid](q, q.stride(0), q.stride(1), head_weights,
                                head_weights.stride(0), keys, keys.stride(0), vis, out,
                                out.stride(0), n, num_keys, **meta)
    return out


def aot_cases() -> list[dict[str, Any]]:
    types = {"q_ptr": "*bf16", "w_ptr": "*fp32", "k_ptr": "*bf16", "vis_ptr": "*i64",
             "out_ptr": "*fp32"}
    return [
        dict(name="index_scores keys on M Hi32 D128", module=__name__,
             kernel="_scores_keys_m_kernel", types=types, meta=launch_meta(32, 128, True)),
    ]
