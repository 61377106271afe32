"""A probe, not yet used by the model: ``mhc_norm.hc_expand_norm`` that also computes the next
site's mHC coefficients from the new streams in the same pass (reference:
``mhc.hc_expand_norm`` then ``mhc.hc_coeffs`` of its y).

Why: after each expand the engine's ``hc_coeffs`` re-reads the new streams (168 MB a site at a
4K prefill; round 159: 81 µs a call against a 39 µs HBM floor, 16 calls). Here the expand's
program holds y already: ``_hc_site_kernel``, grid (N / BM, D / BLOCK_D), BM tokens x BLOCK_D
columns in BD-column steps, computes y (the expand: streams mixed in order i = 0..S-1, then
the branch term — y's last bit can differ from ``mhc.expand_stream``'s order), stores it, the
collapse h and its sum of squares (for ``mhc_norm._rms_apply_kernel``), and the partial
projections m = y_chunk @ fn_chunk^T (one dot of K = S * BD per step: bf16x3 on the GPU, the
fp32 fn split into three bf16 terms as ``mhc._dot_fn_parts``; fp32 "ieee" in the
interpreter) with the chunk's sum of y^2, into the workspace ``mhc._hc_finalize_kernel`` sums
in chunk order (SPLIT = the chunk count) before the Sinkhorn epilogue. BM is fixed (16), so a
token's values never depend on the batch.

``bench``: tests/gpu/test_mhc_norm_gpu.py times it against ``hc_expand_norm`` + ``hc_coeffs``
(round 162); the model adopts it only if it wins there.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import mhc, mhc_norm
from deepinfer.kernels.triton.gemm_fp8 import is_interpreting
from deepinfer.kernels.triton.launch_math import cdiv

BM = 16  # tokens per program (mma M); fixed: batch-invariant
BLOCK_D = 128  # columns per program: 40 chunks at D = 5120 (decode batches fill the GPU)
# columns per step (K = S * BD = 128 per dot) and warps. SM90 compile (session 30): BD 64 at 8
# warps spills 520 B, BD 32 at 4 warps 304 B; BD 32 at 8 warps: 255 registers, no spill (one
# program per SM: the occupancy round 162's timing will show)
BD = 32
NUM_WARPS = 8


@triton.jit
def _hc_site_kernel(out_ptr, x_ptr, post_ptr, comb_ptr, pre_ptr, fn_ptr, y_ptr, h_ptr, hws_ptr,
                    cws_ptr, N, D, num_chunks, stride_on, stride_xn, stride_xs, stride_hn,
                    stride_fn, S: tl.constexpr, C: tl.constexpr, PRECISION: tl.constexpr,
                    FN_PARTS: tl.constexpr, BM: tl.constexpr, BLOCK_D: tl.constexpr,
                    BD: tl.constexpr):
    """Program (token block, chunk); see the module docstring. hws (N, chunks) fp32: sums of
    h^2; cws (chunks, N, C + 1) fp32: [m | sum of y^2] per token, the finalize's layout."""
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    mask_m = offs_m < N
    rows = tl.where(mask_m, offs_m, 0).to(tl.int64)
    chunk = tl.program_id(1)
    streams = tl.arange(0, S)
    cols = tl.arange(0, C)
    # fn row of column c (the coefficient kernel's order): comb rows 2S.., pre rows 0..,
    # post rows S.., then zero padding
    fn_row = tl.where(cols < S * S, 2 * S + cols, cols - S * S)
    live = cols < S * S + 2 * S
    kk = tl.arange(0, S * BD)  # K index of a step: stream kk // BD, column kk % BD
    post = tl.load(post_ptr + rows[:, None] * S + streams[None, :])  # [BM, S]
    pre = tl.load(pre_ptr + rows[:, None] * S + streams[None, :])  # [BM, S]
    m = tl.zeros((BM, C), dtype=tl.float32)
    ysq = tl.zeros((BM,), dtype=tl.float32)
    hsq = tl.zeros((BM,), dtype=tl.float32)
    for sub in range(0, BLOCK_D, BD):
        offs_d = chunk * BLOCK_D + sub + tl.arange(0, BD)
        mask = mask_m[:, None] & (offs_d < D)[None, :]  # [BM, BD]
        o = tl.load(out_ptr + rows[:, None] * stride_on + offs_d[None, :], mask=mask,
                    other=0.0).to(tl.float32)
        mixed = tl.zeros((BM, S, BD), dtype=tl.float32)
        for i in tl.static_range(S):
            x_i = tl.load(x_ptr + rows[:, None] * stride_xn + i * stride_xs + offs_d[None, :],
                          mask=mask, other=0.0).to(tl.float32)  # [BM, BD]
            c_i = tl.load(comb_ptr + rows[:, None] * (S * S) + i * S + streams[None, :])
            mixed += c_i[:, :, None] * x_i[:, None, :]
        y = (post[:, :, None] * o[:, None, :] + mixed).to(y_ptr.dtype.element_ty)  # [BM, S, BD]
        y_ptrs = (y_ptr + rows[:, None, None] * stride_xn + streams[None, :, None] * stride_xs
                  + offs_d[None, None, :])
        tl.store(y_ptrs, y, mask=mask[:, None, :])
        yf = y.to(tl.float32)
        h = tl.sum(pre[:, :, None] * yf, axis=1).to(h_ptr.dtype.element_ty)  # [BM, BD]
        tl.store(h_ptr + rows[:, None] * stride_hn + offs_d[None, :], h, mask=mask)
        hf = h.to(tl.float32)
        hsq += tl.sum(hf * hf, axis=1)
        ysq += tl.sum(tl.sum(yf * yf, axis=2), axis=1)
        col_k = (kk // BD) * D + chunk * BLOCK_D + sub + kk % BD  # [S * BD]
        f = tl.load(fn_ptr + tl.where(live, fn_row, 0)[None, :] * stride_fn + col_k[:, None],
                    mask=live[None, :] & (col_k % D < D)[:, None], other=0.0)  # [S*BD, C]
        if PRECISION == "bf16x3":
            m = mhc._dot_fn_parts(tl.reshape(y, (BM, S * BD)), f, m, FN_PARTS)
        else:
            m = tl.dot(tl.reshape(yf, (BM, S * BD)), f, m, input_precision=PRECISION)
    tl.store(hws_ptr + rows * num_chunks + chunk, hsq, mask=mask_m)
    ws_rows = cws_ptr + (chunk * N + rows) * (C + 1)
    tl.store(ws_rows[:, None] + cols[None, :], m, mask=mask_m[:, None])
    tl.store(ws_rows + C, ysq, mask=mask_m)


def hc_site(out: torch.Tensor, x: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
            pre: torch.Tensor, weight: torch.Tensor, eps: float, fn: torch.Tensor,
            scale: torch.Tensor, base: torch.Tensor, norm_eps: float, hc_eps: float,
            sinkhorn_iters: int, quant: bool = False
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None,
                       tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``mhc_norm.hc_expand_norm``'s (y, h, hq) and the next site's (pre, post, comb) from y
    (``fn`` (2S + S*S, S*D), ``scale`` (3,), ``base`` (2S + S*S,): its coefficient weights).
    D a multiple of BLOCK_D; x bf16 on the GPU (bf16x3), any float in the interpreter."""
    num_tokens, s, dim = x.shape
    assert dim % BLOCK_D == 0 and s & (s - 1) == 0 and s * s >= 16, \
        f"hc_site: x {tuple(x.shape)}: D % {BLOCK_D} and a power-of-two S >= 4 needed"
    assert fn.shape == ((2 + s) * s, s * dim) and fn.stride(1) == 1, tuple(fn.shape)
    interpret = is_interpreting()
    precision = "ieee" if interpret else ("bf16x3" if x.dtype == torch.bfloat16 else "tf32x3")
    x, out = x.contiguous(), out.contiguous()
    dev = x.device
    y = torch.empty_like(x)
    h = torch.empty((num_tokens, dim), dtype=x.dtype, device=dev)
    hq = torch.empty_like(h) if quant else None
    coeffs = (torch.empty((num_tokens, s), dtype=torch.float32, device=dev),
              torch.empty((num_tokens, s), dtype=torch.float32, device=dev),
              torch.empty((num_tokens, s, s), dtype=torch.float32, device=dev))
    if num_tokens == 0:
        return y, h, hq, coeffs
    chunks = dim // BLOCK_D
    c = 2 * s * s
    hws = torch.empty((num_tokens, chunks), dtype=torch.float32, device=dev)
    cws = torch.empty((chunks, num_tokens, c + 1), dtype=torch.float32, device=dev)
    post32, pre32 = post.to(torch.float32).contiguous(), pre.to(torch.float32).contiguous()
    _hc_site_kernel[(cdiv(num_tokens, BM), chunks)](
        out, x, post32, comb.to(torch.float32).contiguous(), pre32, fn, y, h, hws, cws,
        num_tokens, dim, chunks, out.stride(0), x.stride(0), x.stride(1), h.stride(0),
        fn.stride(0), S=s, C=c, PRECISION=precision, FN_PARTS=mhc.COEFFS_FN_PARTS, BM=BM,
        BLOCK_D=BLOCK_D, BD=BD, num_warps=4 if interpret else NUM_WARPS)
    mhc_norm.rms_apply(h, weight, hws, eps, hq)
    fin_bm = mhc.COEFFS_FINALIZE_BLOCK_M
    mhc._hc_finalize_kernel[(cdiv(num_tokens, fin_bm),)](
        cws, scale.to(torch.float32).contiguous(), base.to(torch.float32).contiguous(),
        *coeffs, num_tokens, s * dim, float(norm_eps), float(hc_eps), S=s, C=c,
        SINKHORN_ITERS=int(sinkhorn_iters), SPLIT=chunks, BM=fin_bm, num_warps=4)
    return y, h, hq, coeffs


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases at V4.1's shapes (S = 4, D = 5120, bf16: bf16x3), and the
    finalize over its 40 chunk partials."""
    s, c = 4, 32
    return [
        {"id": "hc_site_s4_bf16x3", "module": __name__, "kernel": "_hc_site_kernel",
         "signature": {"out_ptr": "*bf16", "x_ptr": "*bf16", "post_ptr": "*fp32",
                       "comb_ptr": "*fp32", "pre_ptr": "*fp32", "fn_ptr": "*fp32",
                       "y_ptr": "*bf16", "h_ptr": "*bf16", "hws_ptr": "*fp32",
                       "cws_ptr": "*fp32", "N": "i32", "D": "i32", "num_chunks": "i32",
                       "stride_on": "i32", "stride_xn": "i32", "stride_xs": "i32",
                       "stride_hn": "i32", "stride_fn": "i32"},
         "constexprs": {"S": s, "C": c, "PRECISION": "bf16x3",
                        "FN_PARTS": mhc.COEFFS_FN_PARTS, "BM": BM, "BLOCK_D": BLOCK_D,
                        "BD": BD},
         "num_warps": NUM_WARPS, "num_stages": 1},
        {"id": "hc_finalize_s4_split40", "module": "deepinfer.kernels.triton.mhc",
         "kernel": "_hc_finalize_kernel",
         "signature": {"ws_ptr": "*fp32", "scale_ptr": "*fp32", "base_ptr": "*fp32",
                       "pre_ptr": "*fp32", "post_ptr": "*fp32", "comb_ptr": "*fp32",
                       "N": "i32", "K": "i32", "norm_eps": "fp32", "hc_eps": "fp32"},
         "constexprs": {"S": s, "C": c, "SINKHORN_ITERS": 20, "SPLIT": 5120 // BLOCK_D,
                        "BM": mhc.COEFFS_FINALIZE_BLOCK_M},
         "num_warps": 4, "num_stages": 1},
    ]
