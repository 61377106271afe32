"""The mHC coefficients' projections at prefill sizes with fn's bf16 terms on the MMA's M side
(model-spec §2.3; prepared in session 39, off: ``mhc.COEFFS_KERNEL`` "terms" selects it).

    ws[split, t, c] = sum over the split's K of fn[row(c), k] * x[t, k]   (+ sumsq in column C)

the partial sums ``mhc._hc_finalize_kernel`` reduces (split order) into pre, post and comb, as
``mhc._hc_coeffs_kernel`` writes them at SPLIT > 1.

Why: ``_hc_coeffs_kernel``'s bf16x3 prefill launch puts 64 tokens on M and the 32 fused fn
columns on N: each K step is 12 thin wgmmas (m64 n32 k16: 4 k-slices x 3 bf16 terms of fn),
each re-reading the x tile from shared memory — ~36 KB of shared reads a step for 8 KB of x —
and every program splits the fp32 fn tile in registers and stores the terms to shared memory
(12 STS, 23 LDS, 7 barriers in the sm_90 loop). Nsight Compute (session 38, round 186): 62 % of
DRAM, L1/TEX 82 % its busiest unit; 1.29 ms over a 4K prompt's 16 calls on the H200 against
~0.63 ms of x at the copy rate.

Here fn's three bf16 terms (``mhc.split_bf16_parts``: hi, mid, lo; exact: hi + mid + lo == fn)
are built once per fn tensor (``fn_terms``, cached) as one [MT, K] bf16 matrix, term p's
columns at rows p C .. p C + C - 1 in the fused kernel's column order (comb, pre, post, zero
padding), MT = 4 C (the fourth block zero) — and the kernel is a plain bf16 GEMM with the terms
as A (M = MT, two warpgroups of 64 rows) and the token tile as B (N = ``TOKENS``): per K step
both operands by cp.async, 4 wgmmas of m64 nTOKENS k16 a warpgroup, no split, no shared-memory
store of terms. After the K loop the term blocks are summed, (hi + mid) + (lo + 0): each term
accumulates over the whole split in its own fp32 sum, so the bits differ from the fused
kernel's (which adds the three products into one accumulator each step) — both are fp32 sums of
exact bf16 x bf16 products. sm_90 SASS of the loop (CPU compile, TOKENS 128, 8 warps): 191
instructions a thread for 128 tokens (the fused: 337 for 64), 4 HGMMA, 5 LDS, no STS, 2
barriers; the shared reads a step per 64 tokens ~24 KB against ~36 KB.

The cache holds MT x K x 2 bytes a fn (5.2 MB at V4.1: 128 x 20,480) — a site's fn is a
parameter, built on its first prefill call (a few torch ops) and reused.

Shapes: x (N, S, D) bf16 (the streams; ``STRIDED``: streams ``stride_xs`` apart, as the fused
kernel), terms (MT, S D) bf16, ws (SPLIT, N, C + 1) fp32.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton.mhc import split_bf16_parts, stream_tile_ptrs

TOKENS = 128  # tokens per program: the wgmma N
NUM_WARPS = 8  # two warpgroups: 64 term rows each
NUM_STAGES = 3
_CACHE_MAX = 256  # fn tensors whose terms are kept (V4.1: 2 sites a layer, 43 layers)
_cache: dict[int, tuple[weakref.ref, int, torch.Tensor]] = {}


@triton.jit
def _hc_terms_kernel(x_ptr, t_ptr, ws_ptr, N, K, k_per_split, stride_xn, stride_xs, D, stride_t,
                     C: tl.constexpr, MT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                     STRIDED: tl.constexpr, F32: tl.constexpr):
    """Program (token block, split): the split's K range for BN tokens -> ws[split] rows.
    F32: the interpreter (its bf16 arithmetic is wrong): both operands upcast, an "ieee" dot of
    the same values."""
    split = tl.program_id(1)
    offs_n = tl.program_id(0) * BN + tl.arange(0, BN)
    mask_n = offs_n < N
    rows = tl.where(mask_n, offs_n, 0).to(tl.int64)
    offs_k = tl.arange(0, BK)
    k_begin = split * k_per_split
    x_ptrs = stream_tile_ptrs(x_ptr, rows, offs_k, k_begin, stride_xn, stride_xs, D, STRIDED)
    t_ptrs = t_ptr + tl.arange(0, MT)[:, None] * stride_t + k_begin + offs_k[None, :]
    acc = tl.zeros((MT, BN), dtype=tl.float32)
    sumsq = tl.zeros((BN,), dtype=tl.float32)
    for k0 in range(0, tl.minimum(k_per_split, K - k_begin), BK):
        xt = tl.load(x_ptrs + k0)  # (BN, BK)
        v = xt.to(tl.float32)
        sumsq += tl.sum(v * v, axis=1)
        a = tl.load(t_ptrs + k0)  # (MT, BK)
        if F32:
            acc = tl.dot(a.to(tl.float32), tl.trans(v), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, tl.trans(xt), acc)
    m = tl.trans(tl.sum(tl.reshape(acc, (MT // C, C, BN)), axis=0))  # (BN, C)
    cols = tl.arange(0, C)
    ws_rows = ws_ptr + (split * N + rows) * (C + 1)
    tl.store(ws_rows[:, None] + cols[None, :], m, mask=mask_n[:, None])
    tl.store(ws_rows + C, sumsq, mask=mask_n)


def fn_terms(fn: torch.Tensor, s: int) -> torch.Tensor:
    """(MT, K) bf16: fn's three bf16 terms (``mhc.split_bf16_parts``), term p's columns in the
    fused kernel's order (comb rows 2S.., pre rows 0.., post rows S.., zeros to C = 2 S^2) at
    rows p C ..; MT = 4 C, the last block zero. Cached per fn tensor object while it lives and
    is not changed in place."""
    hit = _cache.get(id(fn))
    if hit is not None and hit[0]() is fn and hit[1] == fn._version:
        return hit[2]
    c = 2 * s * s
    order = list(range(2 * s, 2 * s + s * s)) + list(range(2 * s))  # comb, pre, post
    terms = torch.zeros((4 * c, fn.shape[1]), dtype=torch.bfloat16, device=fn.device)
    for p, part in enumerate(split_bf16_parts(fn, 3)):
        terms[p * c:p * c + len(order)] = part[order]
    if len(_cache) >= _CACHE_MAX:
        _cache.pop(next(iter(_cache)))
    # keyed by the tensor object (its storage address can be reused by a later tensor): the
    # entry leaves with it, and an in-place change (its version) rebuilds
    key = id(fn)
    _cache[key] = (weakref.ref(fn, lambda _, key=key: _cache.pop(key, None)), fn._version,
                   terms)
    return terms


def launch_meta(block_k: int, interpret: bool) -> dict[str, Any]:
    """Constexprs (less C, MT, STRIDED) and launch options at the caller's K step ``block_k``
    (its splits are whole steps); the interpreter: small token blocks, fp32 dots."""
    return dict(BN=16 if interpret else TOKENS, BK=block_k, F32=interpret,
                num_warps=4 if interpret else NUM_WARPS, num_stages=1 if interpret else NUM_STAGES)


def partial_sums(x: torch.Tensor, terms: torch.Tensor, ws: torch.Tensor, k_per_split: int,
                 block_k: int, strided: bool, interpret: bool) -> None:
    """Fill ws (SPLIT, N, C + 1) from x (N, S, D) bf16 and ``fn_terms`` (the caller, ``mhc
    .hc_coeffs``, picks the split — whole ``block_k`` steps — and checks the strides as for the
    fused kernel)."""
    num_tokens, s, dim = x.shape
    c = 2 * s * s
    meta = launch_meta(block_k, interpret)
    grid = (triton.cdiv(num_tokens, meta["BN"]), ws.shape[0])
    _hc_terms_kernel[grid](x, terms, ws, num_tokens, s * dim, k_per_split, x.stride(0),
                           x.stride(1), dim, terms.stride(0), C=c, MT=terms.shape[0],
                           STRIDED=strided, **meta)
