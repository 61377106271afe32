"""One mHC site's expand fused with the next site's collapse and RMSNorm (reference
``mhc.hc_expand_norm``): ``y = hc_expand(out, x, post, comb)``,
``h = rms_norm(hc_collapse(y, pre), weight, eps)``.

Single-pass mHC knows the next site's collapse weights ``pre`` before this site's expand runs
(``runtime/model/block.py``), so the new streams need not be read back for the collapse:

  ``_hc_expand_collapse_kernel``, grid (N, D / BLOCK_D): y's chunk (``mhc.expand_stream``, the
      expand kernel's own code) stored in x's dtype; the collapse of those rounded values with
      pre (streams summed in order, fp32), rounded to x's dtype into h; the chunk's sum of
      squares of that rounded h into a workspace ws (N, D / BLOCK_D) fp32.
  ``_rms_apply_kernel``, grid (N, D / APPLY_BLOCK_D): the row's statistic from its chunk sums (one
      tree over a fixed CHUNKS_P2 vector), ``h = weight * (h * rstd)`` in place; IEEE sqrt and
      division, as ``norm._rms_norm_kernel``; with ``quant`` it also stores h's Q8_32 values
      hq (``quant_act.q8_32_groups`` / ``q8_32_values`` over 32-column groups: the bits of
      ``fake_quant_fp8_block32(h)``), which the site's quantized projections read as they are —
      one rounding instead of one per projection (``runtime/model/block.py``).

Two launches instead of three, and per site at a 4K prefill (V4.1: S = 4, D = 5120, bf16) 504
instead of 672 MB of traffic: the collapse's re-read of y (168 MB) is gone. The chunking is
fixed by D, never by N: a token's values do not depend on the batch (decode graphs of any size
and prefill give each row the same bits). They can differ from the three separate kernels' in
the norm statistic's last bits (its fp32 sum runs in another order).

Shapes: out (N, D), x (N, S, D) bf16/fp16/fp32 (S a power of two; D % 32 == 0 with quant),
post / pre (N, S) fp32, comb (N, S, S) fp32, weight (D,) bf16/fp32; y (N, S, D), h and hq
(N, D) in x's dtype.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2
from deepinfer.kernels.triton.mhc import expand_stream
from deepinfer.kernels.triton.quant_act import q8_32_groups, q8_32_values

BLOCK_D = 512  # the expand kernel's chunk (mhc.hc_expand): the same registers per program
NUM_WARPS = 4
# rms_apply's tile, independent of the chunks whose sums it reads (its statistic sums all of
# them the same way): 8 columns a thread, 16-byte loads and stores (session 38: at 512 columns
# and 4 warps the apply ran at 65 % of the H100's DRAM peak, 8-byte accesses)
APPLY_BLOCK_D = 1024
APPLY_WARPS = 4


@triton.jit
def _hc_expand_collapse_kernel(out_ptr, x_ptr, post_ptr, comb_ptr, pre_ptr, y_ptr, h_ptr, ws_ptr,
                               D, num_chunks, stride_on, stride_xn, stride_xs, stride_hn,
                               S: tl.constexpr, BLOCK_D: tl.constexpr):
    """y's chunk, h = sum_j pre[n, j] * y[n, j, d] of y's rounded values (rounded), and the
    chunk's sum of h^2 -> ws[n, chunk]. x's streams ``stride_xs`` apart (0: the first block's,
    all the embedding, read without a copy); y contiguous (N, S, D)."""
    n = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    offs_d = chunk * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    o = tl.load(out_ptr + n * stride_on + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    x_row = x_ptr + n * stride_xn + offs_d
    hf = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for j in tl.static_range(S):
        y = expand_stream(o, x_row, stride_xs, post_ptr + n * S, comb_ptr + n * S * S, j, mask_d,
                          S).to(y_ptr.dtype.element_ty)  # 0 where masked
        tl.store(y_ptr + n * (S * D) + j * D + offs_d, y, mask=mask_d)
        hf += tl.load(pre_ptr + n * S + j) * y.to(tl.float32)  # streams summed in order
    h = hf.to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + n * stride_hn + offs_d, h, mask=mask_d)
    hf = h.to(tl.float32)
    tl.store(ws_ptr + n * num_chunks + chunk, tl.sum(hf * hf, axis=0))


@triton.jit
def _rms_apply_kernel(h_ptr, w_ptr, ws_ptr, hq_ptr, D, num_chunks, stride_hn, stride_qn, eps,
                      CHUNKS_P2: tl.constexpr, BLOCK_D: tl.constexpr, QUANT: tl.constexpr):
    """h[n, chunk] = w * (h * rstd), rstd = 1 / sqrt(sum of the row's chunk sums / D + eps);
    QUANT: also hq[n, chunk] = the Q8_32 values of that rounded h (32-column groups: a
    [BLOCK_D / 32, 32] tile)."""
    n = tl.program_id(0).to(tl.int64)
    offs_c = tl.arange(0, CHUNKS_P2)
    parts = tl.load(ws_ptr + n * num_chunks + offs_c, mask=offs_c < num_chunks, other=0.0)
    rstd = 1.0 / tl.sqrt_rn(tl.sum(parts, axis=0) / D + eps)
    offs_d = (tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D // 32)[:, None] * 32
              + tl.arange(0, 32)[None, :])  # [G, 32]
    mask_d = offs_d < D
    ptrs = h_ptr + n * stride_hn + offs_d
    h = tl.load(ptrs, mask=mask_d, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    h = (w * (h * rstd)).to(h_ptr.dtype.element_ty)
    tl.store(ptrs, h, mask=mask_d)
    if QUANT:
        codes, e = q8_32_groups(h.to(tl.float32), 1)
        tl.store(hq_ptr + n * stride_qn + offs_d,
                 q8_32_values(codes, e).to(hq_ptr.dtype.element_ty), mask=mask_d)


def hc_expand_norm(out: torch.Tensor, x: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
                   pre: torch.Tensor, weight: torch.Tensor, eps: float, quant: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Registered op (reference ``mhc.hc_expand_norm``): -> y (N, S, D), h (N, D) and, with
    ``quant``, h's Q8_32 values hq (N, D) (else None), in x's dtype; see the module docstring."""
    num_tokens, s, dim = x.shape
    assert s & (s - 1) == 0 and out.shape == (num_tokens, dim) and weight.shape == (dim,), \
        f"hc_expand_norm: x {tuple(x.shape)}, out {tuple(out.shape)}, weight {tuple(weight.shape)}"
    assert dim % 32 == 0 or not quant, f"hc_expand_norm: Q8_32 needs D % 32 == 0, got {dim}"
    if x.stride(2) != 1:
        x = x.contiguous()  # strided streams (stride 0 included) are read as they are
    out = out.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # contiguous
    h = torch.empty((num_tokens, dim), dtype=x.dtype, device=x.device)
    hq = torch.empty_like(h) if quant else None
    if num_tokens == 0:
        return y, h, hq
    block_d = max(32, min(BLOCK_D, next_power_of_2(dim)))
    chunks = cdiv(dim, block_d)
    ws = torch.empty((num_tokens, chunks), dtype=torch.float32, device=x.device)
    grid = (num_tokens, chunks)
    _hc_expand_collapse_kernel[grid](
        out, x, post.to(torch.float32).contiguous(), comb.to(torch.float32).contiguous(),
        pre.to(torch.float32).contiguous(), y, h, ws, dim, chunks, out.stride(0), x.stride(0),
        x.stride(1), h.stride(0), S=s, BLOCK_D=block_d, num_warps=NUM_WARPS)
    rms_apply(h, weight, ws, eps, hq)
    return y, h, hq


def rms_apply(h: torch.Tensor, weight: torch.Tensor, ws: torch.Tensor, eps: float,
              hq: torch.Tensor | None) -> None:
    """``_rms_apply_kernel`` over h (N, D) in place, from the rows' chunk sums of squares ws
    (N, chunks) fp32 (any chunking: the statistic sums them all), in tiles of
    ``APPLY_BLOCK_D`` columns; h's Q8_32 values into hq (N, D) when given."""
    chunks, dim = ws.shape[1], h.shape[1]
    block_d = max(32, min(APPLY_BLOCK_D, next_power_of_2(dim)))
    _rms_apply_kernel[(h.shape[0], cdiv(dim, block_d))](
        h, weight.contiguous(), ws, h if hq is None else hq, dim, chunks, h.stride(0),
        h.stride(0) if hq is None else hq.stride(0), float(eps),
        CHUNKS_P2=max(2, next_power_of_2(chunks)), BLOCK_D=block_d, QUANT=hq is not None,
        num_warps=APPLY_WARPS)


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases at V4.1's shapes (S = 4, D = 5120: 10 chunks of 512)."""
    return [
        {"id": "hc_expand_collapse_s4", "module": __name__,
         "kernel": "_hc_expand_collapse_kernel",
         "signature": {"out_ptr": "*bf16", "x_ptr": "*bf16", "post_ptr": "*fp32",
                       "comb_ptr": "*fp32", "pre_ptr": "*fp32", "y_ptr": "*bf16",
                       "h_ptr": "*bf16", "ws_ptr": "*fp32", "D": "i32", "num_chunks": "i32",
                       "stride_on": "i32", "stride_xn": "i32", "stride_xs": "i32",
                       "stride_hn": "i32"},
         "constexprs": {"S": 4, "BLOCK_D": BLOCK_D}, "num_warps": NUM_WARPS, "num_stages": 1},
    ] + [
        {"id": f"rms_apply_10_chunks{'_q8' if quant else ''}", "module": __name__,
         "kernel": "_rms_apply_kernel",
         "signature": {"h_ptr": "*bf16", "w_ptr": "*bf16", "ws_ptr": "*fp32", "hq_ptr": "*bf16",
                       "D": "i32", "num_chunks": "i32", "stride_hn": "i32", "stride_qn": "i32",
                       "eps": "fp32"},
         "constexprs": {"CHUNKS_P2": 16, "BLOCK_D": APPLY_BLOCK_D, "QUANT": quant},
         "num_warps": APPLY_WARPS, "num_stages": 1}
        for quant in (False, True)
    ]

