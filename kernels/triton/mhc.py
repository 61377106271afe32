"""Manifold-constrained hyper-connections (model-spec §2.3): coefficients with fused Sinkhorn,
collapse (pre) and expand (post). References: ``kernels/reference/mhc.py``.

``_hc_coeffs_kernel``: one program per (BM tokens, K split) streams the flattened streams v once:
the RMS statistic and the three projections m = v @ fn^T (pre rows [0,S), post rows [S,2S), comb
rows [2S, 2S+S²), each its own accumulator so no register tile ever needs slicing) accumulate in
fp32 over K = S*D; the epilogue applies rsqrt, the sigmoids, the row softmax of comb (S×S per
token, a [BM, S, S] register tile), and all ``sinkhorn_iters`` column/row normalizations, then
stores pre (N, S), post (N, S), comb (N, S, S). fn is fp32: the dot runs as 3×TF32 on the GPU
(~fp32 accuracy on tensor cores) and IEEE fp32 in the interpreter. S must be a power of two with
S*S >= 16 (V4.1: S = 4).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import quant_act
from deepinfer.kernels.triton.gemm_fp8 import is_interpreting


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _hc_epilogue(m_pre, m_post, m_comb, sumsq, rows, mask_m, scale_ptr, base_ptr, pre_ptr,
                 post_ptr, comb_ptr, K, norm_eps, hc_eps, S: tl.constexpr, SP: tl.constexpr,
                 SINKHORN_ITERS: tl.constexpr, BM: tl.constexpr):
    """RMS factor, sigmoids, softmax + Sinkhorn of comb, stores (see the module docstring)."""
    cols_p = tl.arange(0, SP)
    cols_c = tl.arange(0, S * S)
    mask_p = cols_p < S
    r = 1.0 / tl.sqrt_rn(sumsq / K + norm_eps)  # [BM]
    scale_pre = tl.load(scale_ptr)
    scale_post = tl.load(scale_ptr + 1)
    scale_comb = tl.load(scale_ptr + 2)
    base_pre = tl.load(base_ptr + cols_p, mask=mask_p, other=0.0)
    base_post = tl.load(base_ptr + S + cols_p, mask=mask_p, other=0.0)
    base_comb = tl.load(base_ptr + 2 * S + cols_c)
    pre = _sigmoid(m_pre * r[:, None] * scale_pre + base_pre[None, :]) + hc_eps
    post = 2.0 * _sigmoid(m_post * r[:, None] * scale_post + base_post[None, :])
    logits = tl.reshape(m_comb * r[:, None] * scale_comb + base_comb[None, :], (BM, S, S))
    # softmax over j (output stream), then Sinkhorn starting with a column normalization
    logits = logits - tl.max(logits, axis=2, keep_dims=True)
    comb = tl.exp(logits)
    comb = comb / tl.sum(comb, axis=2, keep_dims=True) + hc_eps
    comb = comb / (tl.sum(comb, axis=1, keep_dims=True) + hc_eps)
    for _ in tl.static_range(SINKHORN_ITERS - 1):
        comb = comb / (tl.sum(comb, axis=2, keep_dims=True) + hc_eps)
        comb = comb / (tl.sum(comb, axis=1, keep_dims=True) + hc_eps)

    out_p = rows[:, None] * S + cols_p[None, :]
    mask_out_p = mask_m[:, None] & mask_p[None, :]
    tl.store(pre_ptr + out_p, pre, mask=mask_out_p)
    tl.store(post_ptr + out_p, post, mask=mask_out_p)
    tl.store(comb_ptr + rows[:, None] * (S * S) + cols_c[None, :],
             tl.reshape(comb, (BM, S * S)), mask=mask_m[:, None])


@triton.jit
def _hc_coeffs_kernel(x_ptr, fn_ptr, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr, ws_ptr,
                      N, K, k_per_split, stride_xn, stride_fn, norm_eps, hc_eps,
                      S: tl.constexpr, SP: tl.constexpr, SINKHORN_ITERS: tl.constexpr,
                      SPLIT: tl.constexpr, PRECISION: tl.constexpr, BM: tl.constexpr,
                      BK: tl.constexpr):
    """Program (m block, split): the K range [split * k_per_split, +k_per_split) of BM tokens.

    SPLIT == 1: runs the epilogue itself. SPLIT > 1: stores its partial sums to the fp32
    workspace (SPLIT, N, 2*SP + S*S + 1) = [pre SP | post SP | comb S*S | sumsq] for
    ``_hc_finalize_kernel`` (split-K, so that decode batches still fill the GPU).
    """
    split = tl.program_id(1)
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    mask_m = offs_m < N
    rows = tl.where(mask_m, offs_m, 0).to(tl.int64)
    offs_k = tl.arange(0, BK)
    cols_p = tl.arange(0, SP)  # pre/post rows, padded to SP >= 16 for the dot
    cols_c = tl.arange(0, S * S)
    mask_p = cols_p < S
    k_begin = split * k_per_split
    x_ptrs = x_ptr + rows[:, None] * stride_xn + k_begin + offs_k[None, :]
    f_pre = fn_ptr + tl.where(mask_p, cols_p, 0)[None, :] * stride_fn + k_begin + offs_k[:, None]
    f_post = (fn_ptr + tl.where(mask_p, cols_p + S, 0)[None, :] * stride_fn + k_begin
              + offs_k[:, None])
    f_comb = fn_ptr + (cols_c + 2 * S)[None, :] * stride_fn + k_begin + offs_k[:, None]

    m_pre = tl.zeros((BM, SP), dtype=tl.float32)
    m_post = tl.zeros((BM, SP), dtype=tl.float32)
    m_comb = tl.zeros((BM, S * S), dtype=tl.float32)
    sumsq = tl.zeros((BM,), dtype=tl.float32)
    for k0 in range(0, tl.minimum(k_per_split, K - k_begin), BK):
        v = tl.load(x_ptrs + k0).to(tl.float32)
        sumsq += tl.sum(v * v, axis=1)
        m_pre = tl.dot(v, tl.load(f_pre + k0), m_pre, input_precision=PRECISION)
        m_post = tl.dot(v, tl.load(f_post + k0), m_post, input_precision=PRECISION)
        m_comb = tl.dot(v, tl.load(f_comb + k0), m_comb, input_precision=PRECISION)

    if SPLIT == 1:
        _hc_epilogue(m_pre, m_post, m_comb, sumsq, rows, mask_m, scale_ptr, base_ptr, pre_ptr,
                     post_ptr, comb_ptr, K, norm_eps, hc_eps, S, SP, SINKHORN_ITERS, BM)
    else:
        W: tl.constexpr = 2 * SP + S * S + 1
        ws_rows = ws_ptr + (split * N + rows)[:, None] * W
        tl.store(ws_rows + cols_p[None, :], m_pre, mask=mask_m[:, None])
        tl.store(ws_rows + SP + cols_p[None, :], m_post, mask=mask_m[:, None])
        tl.store(ws_rows + 2 * SP + cols_c[None, :], m_comb, mask=mask_m[:, None])
        tl.store(ws_ptr + (split * N + rows) * W + 2 * SP + S * S, sumsq, mask=mask_m)


@triton.jit
def _hc_finalize_kernel(ws_ptr, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr, N, K,
                        norm_eps, hc_eps, S: tl.constexpr, SP: tl.constexpr,
                        SINKHORN_ITERS: tl.constexpr, SPLIT: tl.constexpr, BM: tl.constexpr):
    """Sum the SPLIT partials in split order (deterministic), then the epilogue."""
    W: tl.constexpr = 2 * SP + S * S + 1
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    mask_m = offs_m < N
    rows = tl.where(mask_m, offs_m, 0).to(tl.int64)
    cols_p = tl.arange(0, SP)
    cols_c = tl.arange(0, S * S)
    m_pre = tl.zeros((BM, SP), dtype=tl.float32)
    m_post = tl.zeros((BM, SP), dtype=tl.float32)
    m_comb = tl.zeros((BM, S * S), dtype=tl.float32)
    sumsq = tl.zeros((BM,), dtype=tl.float32)
    for split in tl.static_range(SPLIT):
        ws_rows = ws_ptr + (split * N + rows)[:, None] * W
        m_pre += tl.load(ws_rows + cols_p[None, :])
        m_post += tl.load(ws_rows + SP + cols_p[None, :])
        m_comb += tl.load(ws_rows + 2 * SP + cols_c[None, :])
        sumsq += tl.load(ws_ptr + (split * N + rows) * W + 2 * SP + S * S)
    _hc_epilogue(m_pre, m_post, m_comb, sumsq, rows, mask_m, scale_ptr, base_ptr, pre_ptr,
                 post_ptr, comb_ptr, K, norm_eps, hc_eps, S, SP, SINKHORN_ITERS, BM)


@triton.jit
def _hc_collapse_kernel(x_ptr, pre_ptr, out_ptr, D, stride_xn, stride_xs, stride_on,
                        S: tl.constexpr, BLOCK_D: tl.constexpr):
    """out[n, d] = sum_i pre[n, i] * x[n, i, d] (fp32), cast to out's dtype."""
    n = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    streams = tl.arange(0, S)
    x = tl.load(x_ptr + n * stride_xn + streams[:, None] * stride_xs + offs_d[None, :],
                mask=mask_d[None, :], other=0.0).to(tl.float32)
    pre = tl.load(pre_ptr + n * S + streams)
    out = tl.sum(pre[:, None] * x, axis=0)
    tl.store(out_ptr + n * stride_on + offs_d, out.to(out_ptr.dtype.element_ty), mask=mask_d)


@triton.jit
def _hc_expand_kernel(out_ptr, x_ptr, post_ptr, comb_ptr, y_ptr, D, stride_on, stride_xn,
                      stride_xs, S: tl.constexpr, BLOCK_D: tl.constexpr):
    """y[n, j, d] = post[n, j] * out[n, d] + sum_i comb[n, i, j] * x[n, i, d] (fp32)."""
    n = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    streams = tl.arange(0, S)
    x = tl.load(x_ptr + n * stride_xn + streams[:, None] * stride_xs + offs_d[None, :],
                mask=mask_d[None, :], other=0.0).to(tl.float32)  # [S_i, BD]
    o = tl.load(out_ptr + n * stride_on + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    post = tl.load(post_ptr + n * S + streams)  # [S_j]
    comb = tl.load(comb_ptr + n * S * S + streams[:, None] * S + streams[None, :])  # [S_i, S_j]
    mixed = tl.sum(comb[:, :, None] * x[:, None, :], axis=0)  # [S_j, BD]
    y = post[:, None] * o[None, :] + mixed
    tl.store(y_ptr + n * stride_xn + streams[:, None] * stride_xs + offs_d[None, :],
             y.to(y_ptr.dtype.element_ty), mask=mask_d[None, :])


# _hc_coeffs_kernel's launch (bench/mhc_prefill.py varies them): BM=16 tokens (mma.sync M), BK=64
# of S*D (BK=128 spills with the 3xTF32 operand splits), split-K up to TARGET_PROGRAMS programs.
# Each program streams its K range serially (320 BK steps at split 1), so a 4K prefill's 256
# token blocks at ~2 programs per SM ran latency-bound (1.04 ms per call on the H200, session 5,
# ~4 % of the time its bf16 input takes to read); 4 programs per SM split K two ways there:
# 0.870 ms vs 1.131 (split 1), 0.966 (split 4), 0.972 (split 8) on the H200 (session 6 round 11,
# bench/mhc_prefill.py; decode's split is capped at 32 either way, 64 tokens ~0.19 ms for all).
COEFFS_BLOCK_M = 16
COEFFS_BLOCK_K = 64
COEFFS_NUM_WARPS = 4
COEFFS_NUM_STAGES = 4
COEFFS_TARGET_PROGRAMS = 528


def coeffs_config(interpret: bool = False) -> dict:
    """The launch of ``_hc_coeffs_kernel`` (module constants above; the interpreter: small)."""
    if interpret:
        return dict(BM=16, BK=32, num_warps=4, num_stages=1, target_programs=2)
    return dict(BM=COEFFS_BLOCK_M, BK=COEFFS_BLOCK_K, num_warps=COEFFS_NUM_WARPS,
                num_stages=COEFFS_NUM_STAGES, target_programs=COEFFS_TARGET_PROGRAMS)


def coeffs_split(num_tokens: int, num_k: int, cfg: dict) -> int:
    """K partitions of a launch: up to ``target_programs`` programs, >= 4 BK steps each, <= 32."""
    num_m_blocks = triton.cdiv(num_tokens, cfg["BM"])
    return max(1, min(cfg["target_programs"] // num_m_blocks, num_k // cfg["BK"] // 4, 32))


def hc_coeffs(x: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor,
              norm_eps: float, hc_eps: float, sinkhorn_iters: int, split: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Registered op (reference ``mhc.hc_coeffs``): pre, post (N, S), comb (N, S, S), all fp32.

    ``split`` (K partitions) defaults to enough programs to fill the GPU: decode batches of a few
    dozen tokens would otherwise stream S*D = 20480 columns with a handful of programs.
    """
    num_tokens, s, dim = x.shape
    assert s & (s - 1) == 0 and s * s >= 16, f"hc_coeffs: S={s} must be a power of two >= 4"
    assert fn.shape == ((2 + s) * s, s * dim) and fn.stride(1) == 1
    x2 = x.reshape(num_tokens, s * dim)
    assert x2.stride(1) == 1
    interpret = is_interpreting()
    cfg = coeffs_config(interpret)
    num_k = s * dim
    assert num_k % cfg["BK"] == 0
    dev = x.device
    pre = torch.empty((num_tokens, s), dtype=torch.float32, device=dev)
    post = torch.empty((num_tokens, s), dtype=torch.float32, device=dev)
    comb = torch.empty((num_tokens, s, s), dtype=torch.float32, device=dev)
    if num_tokens == 0:
        return pre, post, comb
    num_m_blocks = triton.cdiv(num_tokens, cfg["BM"])
    num_k_blocks = num_k // cfg["BK"]
    split = coeffs_split(num_tokens, num_k, cfg) if split is None else split
    k_blocks_per_split = triton.cdiv(num_k_blocks, split)
    split = triton.cdiv(num_k_blocks, k_blocks_per_split)  # no empty splits
    sp = max(16, s)
    ws = (torch.empty((split, num_tokens, 2 * sp + s * s + 1), dtype=torch.float32, device=dev)
          if split > 1 else pre)
    scale = scale.to(torch.float32).contiguous()
    base = base.to(torch.float32).contiguous()
    common = dict(S=s, SP=sp, SINKHORN_ITERS=int(sinkhorn_iters))
    _hc_coeffs_kernel[(num_m_blocks, split)](
        x2, fn, scale, base, pre, post, comb, ws, num_tokens, num_k,
        k_blocks_per_split * cfg["BK"], x2.stride(0), fn.stride(0), float(norm_eps),
        float(hc_eps), SPLIT=split, PRECISION="ieee" if interpret else "tf32x3", BM=cfg["BM"],
        BK=cfg["BK"], num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **common)
    if split > 1:
        _hc_finalize_kernel[(num_m_blocks,)](
            ws, scale, base, pre, post, comb, num_tokens, num_k, float(norm_eps), float(hc_eps),
            SPLIT=split, BM=cfg["BM"], num_warps=4, **common)
    return pre, post, comb


def hc_collapse(x: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """Registered op (reference ``mhc.hc_collapse``): (N, S, D), (N, S) -> (N, D) x.dtype."""
    num_tokens, s, dim = x.shape
    assert x.stride(2) == 1 and s & (s - 1) == 0
    out = torch.empty((num_tokens, dim), dtype=x.dtype, device=x.device)
    if num_tokens == 0:
        return out
    block_d = min(1024, triton.next_power_of_2(dim))
    _hc_collapse_kernel[(num_tokens, triton.cdiv(dim, block_d))](
        x, pre.to(torch.float32).contiguous(), out, dim, x.stride(0), x.stride(1), out.stride(0),
        S=s, BLOCK_D=block_d, num_warps=4)
    return out


def hc_expand(out: torch.Tensor, x: torch.Tensor, post: torch.Tensor,
              comb: torch.Tensor) -> torch.Tensor:
    """Registered op (reference ``mhc.hc_expand``): -> (N, S, D) in x's dtype."""
    num_tokens, s, dim = x.shape
    x = x.contiguous()
    out = out.contiguous()
    y = torch.empty_like(x)
    if num_tokens == 0:
        return y
    block_d = min(512, triton.next_power_of_2(dim))
    _hc_expand_kernel[(num_tokens, triton.cdiv(dim, block_d))](
        out, x, post.to(torch.float32).contiguous(), comb.to(torch.float32).contiguous(), y, dim,
        out.stride(0), x.stride(0), x.stride(1), S=s, BLOCK_D=block_d, num_warps=4)
    return y


def supports_mhc(spec: dict) -> bool:
    """CUDA SM90+; ``hc_mult`` (optional) a power of two >= 4; ``hidden_size`` (optional) % 32."""
    hc = spec.get("hc_mult", 4)
    return (quant_act.is_cuda_sm90_plus(spec) and hc >= 4 and hc & (hc - 1) == 0
            and spec.get("hidden_size", 32) % 32 == 0)
