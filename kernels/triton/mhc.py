"""Manifold-constrained hyper-connections (model-spec §2.3): coefficients with fused Sinkhorn,
collapse (pre) and expand (post). References: ``kernels/reference/mhc.py``.

``_hc_coeffs_kernel``: one program per (BM tokens, K split) streams the flattened streams v once:
the RMS statistic and the three projections m = v @ fn^T (pre rows [0,S), post rows [S,2S), comb
rows [2S, 2S+S²)) accumulate in fp32 over K = S*D in one [BM, C = 2 S²] tile (columns: comb,
pre, post, zero padding; one dot per K step), which the epilogue splits by one-hot selection
(exact; a register tile cannot be sliced); the epilogue applies rsqrt, the sigmoids, the row
softmax of comb (S×S per token, a [BM, S, S] register tile), and all ``sinkhorn_iters``
column/row normalizations, then stores pre (N, S), post (N, S), comb (N, S, S). S must be a
power of two with S*S >= 16 (V4.1: S = 4).

The dot's precision (constexpr PRECISION) keeps m at fp32 accuracy while fn is fp32:
  * "bf16x3" (the GPU default for a bf16 x at prefill sizes; 2.7x faster there, round 35; decode
    keeps tf32x3, faster at 16-token blocks, round 36): x is loaded as bf16 and fed to the tensor
    cores as is (the sum of squares uses an fp32 upcast of the same tile); each fp32 fn tile is
    split in registers into FN_PARTS bf16 terms, hi = bf16(fn), mid = bf16(fn - hi), lo = bf16(fn -
    hi - mid), and m += x @ hi + x @ mid + x @ lo as bf16 MMAs with fp32 accumulation. Three parts
    are exact: hi holds the top 8 of fn's 24 significant bits and leaves a residual of at most 16
    bits, mid leaves at most 8, which lo holds exactly: hi + mid + lo == fn for 0 and 2^-110 <= |fn|
    < 3.39e38 (bf16 has fp32's exponents; below, lo's last bits fall under bf16's smallest subnormal
    2^-133; above, hi overflows; ``split_bf16_parts`` is the torch twin). Each bf16 x bf16 product
    is exact in fp32, so the dot is as exact as an fp32 dot up to the fp32 accumulation. Two parts
    keep 16-17 bits of fn (relative error <= 2^-16): ~7x tf32x3's coefficient error at V4.1 shapes
    (4e-6 vs 6e-7, emulated on the CPU), inside the GPU test's 1e-4 but not as accurate, so
    FN_PARTS=2 is a bench variant, not the default.
  * "tf32x3" (the previous GPU route; also any non-bf16 x on the GPU): fp32 operands, Triton's
    3xTF32 split of both x and fn in every program and K step; with bf16 x, x's low TF32 part
    is exactly zero, so one of the three TF32 MMAs (each half bf16's rate) is wasted work.
  * "ieee": the interpreter (TRITON_INTERPRET=1) computes in fp32; its bf16 arithmetic is wrong
    (a bf16 dot multiplies the raw uint16 storage), so bf16x3 never runs there.
Launch by token count (``coeffs_config``): decode batches (<= COEFFS_DECODE_MAX_TOKENS) use
BM=16-token blocks with split-K to fill the GPU, in tf32x3; prefill uses COEFFS_BLOCK_M_PREFILL-
token blocks (one warpgroup's wgmma M), so each program's fn tiles (re-read from L2 and re-split
per token block: 3.9 MB at V4.1) serve 4x more tokens than at BM=16.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import quant_act
from deepinfer.kernels.triton.gemm_fp8 import INVARIANT_MIN_ROWS, is_interpreting
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _dot_fn_parts(x, fn, acc, FN_PARTS: tl.constexpr):
    """acc + x @ fn: bf16 x [BM, BK], fp32 fn [BK, N] split into FN_PARTS bf16 terms (hi first;
    ``split_bf16_parts`` is the torch twin), one bf16 MMA with fp32 accumulation per term."""
    rest = fn
    for _ in tl.static_range(FN_PARTS):
        part = rest.to(tl.bfloat16)
        acc = tl.dot(x, part, acc, out_dtype=tl.float32)
        rest = rest - part.to(tl.float32)
    return acc


@triton.jit
def _hc_select(m, first: tl.constexpr, WIDTH: tl.constexpr, C: tl.constexpr):
    """Columns [first, first + WIDTH) of m [BM, C] as [BM, WIDTH] (a one-hot selection: exact,
    and a register tile needs no slicing)."""
    pick = (tl.arange(0, C)[:, None] == first + tl.arange(0, WIDTH)[None, :])  # [C, WIDTH]
    return tl.sum(tl.where(pick[None, :, :], m[:, :, None], 0.0), axis=1)


@triton.jit
def _hc_epilogue(m, sumsq, rows, mask_m, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr, K,
                 norm_eps, hc_eps, S: tl.constexpr, C: tl.constexpr,
                 SINKHORN_ITERS: tl.constexpr, BM: tl.constexpr):
    """RMS factor, sigmoids, softmax + Sinkhorn of comb, stores (see the module docstring).
    m [BM, C]: the projections in the kernel's column order (comb, pre, post, padding)."""
    cols_p = tl.arange(0, S)
    cols_c = tl.arange(0, S * S)
    m_comb = _hc_select(m, 0, S * S, C)
    m_pre = _hc_select(m, S * S, S, C)
    m_post = _hc_select(m, S * S + S, S, C)
    r = 1.0 / tl.sqrt_rn(sumsq / K + norm_eps)  # [BM]
    scale_pre = tl.load(scale_ptr)
    scale_post = tl.load(scale_ptr + 1)
    scale_comb = tl.load(scale_ptr + 2)
    base_pre = tl.load(base_ptr + cols_p)
    base_post = tl.load(base_ptr + S + cols_p)
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
    tl.store(pre_ptr + out_p, pre, mask=mask_m[:, None])
    tl.store(post_ptr + out_p, post, mask=mask_m[:, None])
    tl.store(comb_ptr + rows[:, None] * (S * S) + cols_c[None, :],
             tl.reshape(comb, (BM, S * S)), mask=mask_m[:, None])


@triton.jit
def _hc_coeffs_kernel(x_ptr, fn_ptr, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr, ws_ptr,
                      N, K, k_per_split, stride_xn, stride_xs, D, stride_fn, norm_eps, hc_eps,
                      S: tl.constexpr, C: tl.constexpr, SINKHORN_ITERS: tl.constexpr,
                      SPLIT: tl.constexpr, PRECISION: tl.constexpr, FN_PARTS: tl.constexpr,
                      BM: tl.constexpr, BK: tl.constexpr, STRIDED: tl.constexpr = False):
    """Program (m block, split): the K range [split * k_per_split, +k_per_split) of BM tokens.

    One fn tile [BK, C] per K step holds all 2S + S*S projection rows (columns: comb, pre,
    post, then zero padding to C = 2 S*S), so each step is one dot (FN_PARTS under
    bf16x3) of N = C: session 17 replaced three dots of N = 16 each (pre and post padded to
    16) — nine wgmmas of N 16 per step under bf16x3, each waited in turn.
    PRECISION "bf16x3" (bf16 x only): bf16 MMAs over FN_PARTS bf16 terms of fn; otherwise a
    tl.dot input_precision ("tf32x3" on the GPU, "ieee" in the interpreter) on fp32 operands.
    SPLIT == 1: runs the epilogue itself. SPLIT > 1: stores its partial sums to the fp32
    workspace (SPLIT, N, C + 1) = [m (C) | sumsq] for ``_hc_finalize_kernel`` (split-K, so
    that decode batches still fill the GPU).
    STRIDED: x's streams are ``stride_xs`` apart, not D (0: the first block's streams, all
    the embedding, read without a copy); the split's K range lies in one stream (D a multiple
    of k_per_split: the host copies x otherwise), stream k_begin // D from column k_begin % D.
    The loop is the contiguous one (the same pipelining and registers).
    """
    split = tl.program_id(1)
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    mask_m = offs_m < N
    rows = tl.where(mask_m, offs_m, 0).to(tl.int64)
    offs_k = tl.arange(0, BK)
    cols = tl.arange(0, C)
    # fn row of column c: comb rows 2S.. for c < S*S, then pre rows 0.., post rows S.., then none
    c2 = cols - S * S
    fn_row = tl.where(cols < S * S, 2 * S + cols, c2)
    live = cols < S * S + 2 * S
    k_begin = split * k_per_split
    if STRIDED:  # the split's K range lies in one stream (the host checks D % k_per_split)
        # multiples of 16 (BK and D are; the host checks the stride): aligned, vector loads
        first = tl.multiple_of((k_begin // D) * stride_xs, 16) + tl.multiple_of(k_begin % D, 16)
        x_ptrs = x_ptr + rows[:, None] * stride_xn + first + offs_k[None, :]
    else:
        x_ptrs = x_ptr + rows[:, None] * stride_xn + k_begin + offs_k[None, :]
    f_ptrs = (fn_ptr + tl.where(live, fn_row, 0)[None, :] * stride_fn + k_begin
              + offs_k[:, None])

    m = tl.zeros((BM, C), dtype=tl.float32)
    sumsq = tl.zeros((BM,), dtype=tl.float32)
    for k0 in range(0, tl.minimum(k_per_split, K - k_begin), BK):
        xt = tl.load(x_ptrs + k0)
        v = xt.to(tl.float32)
        sumsq += tl.sum(v * v, axis=1)
        f = tl.load(f_ptrs + k0, mask=live[None, :], other=0.0)
        if PRECISION == "bf16x3":
            m = _dot_fn_parts(xt, f, m, FN_PARTS)
        else:
            m = tl.dot(v, f, m, input_precision=PRECISION)

    if SPLIT == 1:
        _hc_epilogue(m, sumsq, rows, mask_m, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr,
                     K, norm_eps, hc_eps, S, C, SINKHORN_ITERS, BM)
    else:
        ws_rows = ws_ptr + (split * N + rows) * (C + 1)
        tl.store(ws_rows[:, None] + cols[None, :], m, mask=mask_m[:, None])
        tl.store(ws_rows + C, sumsq, mask=mask_m)


@triton.jit
def _hc_finalize_kernel(ws_ptr, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr, N, K,
                        norm_eps, hc_eps, S: tl.constexpr, C: tl.constexpr,
                        SINKHORN_ITERS: tl.constexpr, SPLIT: tl.constexpr, BM: tl.constexpr):
    """Sum the SPLIT partials in split order (deterministic), then the epilogue."""
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    mask_m = offs_m < N
    rows = tl.where(mask_m, offs_m, 0).to(tl.int64)
    cols = tl.arange(0, C)
    m = tl.zeros((BM, C), dtype=tl.float32)
    sumsq = tl.zeros((BM,), dtype=tl.float32)
    for split in tl.static_range(SPLIT):
        ws_rows = ws_ptr + (split * N + rows) * (C + 1)
        m += tl.load(ws_rows[:, None] + cols[None, :])
        sumsq += tl.load(ws_rows + C)
    _hc_epilogue(m, sumsq, rows, mask_m, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr, K,
                 norm_eps, hc_eps, S, C, SINKHORN_ITERS, BM)


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
def expand_stream(o, x_row_ptr, stride_xs, post_n_ptr, comb_n_ptr, j, mask_d,
                  S: tl.constexpr):
    """[BD] fp32: stream j of y for one chunk, ``post[n, j] * out[n, d] + sum_i comb[n, i, j] *
    x[n, i, d]`` — the branch term, then the streams in order i = 0..S-1. o: out's chunk (fp32),
    x_row_ptr: x[n, 0, chunk] ([BD] pointers), post_n_ptr / comb_n_ptr: row n of post / comb;
    masked columns give 0. Shared by ``_hc_expand_kernel`` and ``mhc_norm``'s fused expand,
    so both store the same bits.

    Everything stays one [BD] vector per stream (x's rows are re-read per j, from L1): the
    earlier [S_i, S_j, BD] product converted layouts through shared memory several times a
    program in sm_90 SASS (session 38)."""
    y = tl.load(post_n_ptr + j) * o
    for i in tl.static_range(S):
        x_i = tl.load(x_row_ptr + i * stride_xs, mask=mask_d, other=0.0).to(tl.float32)
        y += tl.load(comb_n_ptr + i * S + j) * x_i
    return y


@triton.jit
def _hc_expand_kernel(out_ptr, x_ptr, post_ptr, comb_ptr, y_ptr, D, stride_on, stride_xn,
                      stride_xs, S: tl.constexpr, BLOCK_D: tl.constexpr):
    """y[n, j, d] = post[n, j] * out[n, d] + sum_i comb[n, i, j] * x[n, i, d] (fp32)."""
    n = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    o = tl.load(out_ptr + n * stride_on + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    x_row = x_ptr + n * stride_xn + offs_d
    for j in tl.static_range(S):
        y = expand_stream(o, x_row, stride_xs, post_ptr + n * S, comb_ptr + n * S * S, j, mask_d,
                          S)
        tl.store(y_ptr + n * stride_xn + j * stride_xs + offs_d, y.to(y_ptr.dtype.element_ty),
                 mask=mask_d)  # y: x's strides (contiguous)


# _hc_coeffs_kernel's launch (bench/mhc_prefill.py varies them): BK=64 of S*D (BK=128 spilled
# with the 3xTF32 operand splits), split-K up to TARGET_PROGRAMS programs. Each program streams
# its K range serially (320 BK steps at split 1). With BM=16 tokens (mma.sync M) and 3xTF32 for
# every call, a 4K prefill's 256 token blocks each re-read and re-split all of fn; split 2 at
# 4 programs per SM was best: 0.870 ms vs 1.131 (split 1), 0.966 (split 4), 0.972 (split 8) on
# the H200 (session 6 round 11; ~20x the time to read x once; decode's split is capped at 32,
# 64 tokens ~0.19 ms for all). Session 10 (round 35, bench/mhc_prefill.py, H200): bf16x3 (module
# docstring) for bf16 x, and calls of more than COEFFS_DECODE_MAX_TOKENS tokens in BM=64 blocks
# (one warpgroup's wgmma M; split 8 at the same program target): 4,096 tokens 0.936 -> 0.344 ms
# (BM 128: 0.340; two fn parts: 0.323, but ~7x tf32x3's error); 64 tokens: BM 16 0.188 ms,
# BM 32 0.114, BM 64 0.122 (tf32x3 at BM 16: 0.232) — but those are launch-bound: in the
# decode step's graph replay (round 35b, 64 x 4K) BM 32 cost 330 + 250 us (coeffs + finalize)
# per step against 278 + 119 for BM 16 tf32x3 (round 32), and BM 16 bf16x3 (round 36) 329 +
# 120 (256 x 32K: 899 + 121 against 842 + 121): at 16 tokens a program's three fn splits and
# nine mma.sync dots cost more than 3xTF32's, so decode keeps the session-6 launch, tf32x3.
COEFFS_PRECISION = "bf16x3"  # prefill; or "tf32x3"; "ieee" in the interpreter
COEFFS_PRECISION_DECODE = "tf32x3"  # or "bf16x3" (slower at decode, round 36)
COEFFS_FN_PARTS = 3  # bf16 terms of fn under bf16x3: 3 exact, 2 keep ~17 bits
COEFFS_BLOCK_K = 64
COEFFS_NUM_STAGES = 4
COEFFS_TARGET_PROGRAMS = 528
# K partitions of every launch from gemm_fp8.INVARIANT_MIN_ROWS tokens (0: by the token count, as
# below that): a fixed split keeps each token's sums in one order at any step size (4,096 tokens
# split 8 ways by the program target, 8,192 tokens 4: session 22 round 124a).
COEFFS_INVARIANT_SPLIT = 8
# up to here the decode launch, above it the prefill launch. Session 14 round 63a (finalize at
# BM 16): 256-token decode steps 848 + 122 -> 342 + 125 µs per step (coefficients + finalize);
# 64 tokens on the prefill launch were slower (278 -> 323), so 65-128 stay on the decode one
# (the standalone bench: 0.150 vs 0.141 ms at 128 tokens, within noise).
COEFFS_DECODE_MAX_TOKENS = 128
COEFFS_BLOCK_M = 16  # decode
COEFFS_NUM_WARPS = 4
COEFFS_BLOCK_M_PREFILL = 64
COEFFS_NUM_WARPS_PREFILL = 4  # one warpgroup per 64 tokens
# ``_hc_finalize_kernel``'s token block, whatever the coefficients' BM: it sums the split
# partials and runs the Sinkhorn epilogue, a serial loop per token block — at the prefill
# launch's BM 64 a 256-token decode step's finalize ran in 4 programs (session 13 round 57b:
# 122 -> 553 µs per step), so the prefill launch's 2.5x faster coefficients (850 -> 334 µs)
# bought nothing.
COEFFS_FINALIZE_BLOCK_M = 16


def coeffs_config(num_tokens: int, interpret: bool = False) -> dict:
    """The launch of ``_hc_coeffs_kernel`` for a call of ``num_tokens`` tokens (module constants
    above, read at call time; the interpreter: small, fp32 "ieee")."""
    if interpret:
        return dict(BM=16, BK=32, num_warps=4, num_stages=1, target_programs=2,
                    precision="ieee", fn_parts=COEFFS_FN_PARTS, finalize_BM=8)
    prefill = num_tokens > COEFFS_DECODE_MAX_TOKENS
    return dict(BM=COEFFS_BLOCK_M_PREFILL if prefill else COEFFS_BLOCK_M, BK=COEFFS_BLOCK_K,
                num_warps=COEFFS_NUM_WARPS_PREFILL if prefill else COEFFS_NUM_WARPS,
                num_stages=COEFFS_NUM_STAGES, target_programs=COEFFS_TARGET_PROGRAMS,
                precision=COEFFS_PRECISION if prefill else COEFFS_PRECISION_DECODE,
                fn_parts=COEFFS_FN_PARTS, finalize_BM=COEFFS_FINALIZE_BLOCK_M,
                invariant_split=COEFFS_INVARIANT_SPLIT)


def split_bf16_parts(fn: torch.Tensor, parts: int = COEFFS_FN_PARTS) -> list[torch.Tensor]:
    """The torch twin of ``_dot_fn_parts``'s split (reference and documentation only): fp32 fn
    -> ``parts`` bf16 tensors, hi first, each the bf16 rounding (nearest even, as the kernel's
    cast) of what the previous ones leave. Three parts sum to fn exactly for 0 and 2^-110 <=
    |fn| < 3.39e38 (module docstring); two leave a relative error <= 2^-16."""
    rest = fn.to(torch.float32)
    out = []
    for _ in range(parts):
        part = rest.to(torch.bfloat16)
        out.append(part)
        rest = rest - part.to(torch.float32)
    return out


def coeffs_split(num_tokens: int, num_k: int, cfg: dict) -> int:
    """K partitions of a launch: up to ``target_programs`` programs, >= 4 BK steps each, <= 32;
    from ``gemm_fp8.INVARIANT_MIN_ROWS`` tokens ``invariant_split`` (when set), whatever the
    token count."""
    most = num_k // cfg["BK"] // 4
    if cfg.get("invariant_split") and num_tokens >= INVARIANT_MIN_ROWS:
        return max(1, min(cfg["invariant_split"], most))
    num_m_blocks = cdiv(num_tokens, cfg["BM"])
    return max(1, min(cfg["target_programs"] // num_m_blocks, most, 32))


def hc_coeffs(x: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor,
              norm_eps: float, hc_eps: float, sinkhorn_iters: int, split: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Registered op (reference ``mhc.hc_coeffs``): pre, post (N, S), comb (N, S, S), all fp32.

    ``split`` (K partitions) defaults to enough programs to fill the GPU: decode batches of a few
    dozen tokens would otherwise stream S*D = 20480 columns with a handful of programs. The
    token block and the dot's precision follow ``coeffs_config(num_tokens)``; bf16x3 needs a bf16
    x (any other dtype runs tf32x3).
    """
    num_tokens, s, dim = x.shape
    assert s & (s - 1) == 0 and s * s >= 16, f"hc_coeffs: S={s} must be a power of two >= 4"
    assert fn.shape == ((2 + s) * s, s * dim) and fn.stride(1) == 1
    interpret = is_interpreting()
    cfg = coeffs_config(num_tokens, interpret)
    if x.stride(2) != 1:
        x = x.contiguous()
    precision = cfg["precision"]
    if precision == "bf16x3" and x.dtype != torch.bfloat16:
        precision = "tf32x3"  # bf16 MMAs would round an fp16/fp32 x
    num_k = s * dim
    assert num_k % cfg["BK"] == 0
    dev = x.device
    pre = torch.empty((num_tokens, s), dtype=torch.float32, device=dev)
    post = torch.empty((num_tokens, s), dtype=torch.float32, device=dev)
    comb = torch.empty((num_tokens, s, s), dtype=torch.float32, device=dev)
    if num_tokens == 0:
        return pre, post, comb
    num_m_blocks = cdiv(num_tokens, cfg["BM"])
    num_k_blocks = num_k // cfg["BK"]
    split = coeffs_split(num_tokens, num_k, cfg) if split is None else split
    k_blocks_per_split = cdiv(num_k_blocks, split)
    split = cdiv(num_k_blocks, k_blocks_per_split)  # no empty splits
    # strided streams (stride 0: the first block's, all the embedding) read as they are when
    # every split lies in one stream; else one contiguous copy
    strided = x.stride(1) != dim
    if strided and (dim % (k_blocks_per_split * cfg["BK"]) or x.stride(1) % 16 or dim % 16):
        x, strided = x.contiguous(), False
    c = 2 * s * s  # the fused fn tile's columns: comb, pre, post, padding
    ws = (torch.empty((split, num_tokens, c + 1), dtype=torch.float32, device=dev)
          if split > 1 else pre)
    scale = scale.to(torch.float32).contiguous()
    base = base.to(torch.float32).contiguous()
    common = dict(S=s, C=c, SINKHORN_ITERS=int(sinkhorn_iters))
    _hc_coeffs_kernel[(num_m_blocks, split)](
        x, fn, scale, base, pre, post, comb, ws, num_tokens, num_k,
        k_blocks_per_split * cfg["BK"], x.stride(0), x.stride(1), dim, fn.stride(0),
        float(norm_eps),
        float(hc_eps), SPLIT=split, PRECISION=precision, FN_PARTS=cfg["fn_parts"], BM=cfg["BM"],
        BK=cfg["BK"], STRIDED=strided, num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **common)
    if split > 1:
        fin_bm = cfg["finalize_BM"]
        _hc_finalize_kernel[(cdiv(num_tokens, fin_bm),)](
            ws, scale, base, pre, post, comb, num_tokens, num_k, float(norm_eps), float(hc_eps),
            SPLIT=split, BM=fin_bm, num_warps=4, **common)
    return pre, post, comb


def hc_collapse(x: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """Registered op (reference ``mhc.hc_collapse``): (N, S, D), (N, S) -> (N, D) x.dtype."""
    num_tokens, s, dim = x.shape
    assert x.stride(2) == 1 and s & (s - 1) == 0
    out = torch.empty((num_tokens, dim), dtype=x.dtype, device=x.device)
    if num_tokens == 0:
        return out
    block_d = min(1024, next_power_of_2(dim))
    _hc_collapse_kernel[(num_tokens, cdiv(dim, block_d))](
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
    block_d = min(512, next_power_of_2(dim))
    _hc_expand_kernel[(num_tokens, cdiv(dim, block_d))](
        out, x, post.to(torch.float32).contiguous(), comb.to(torch.float32).contiguous(), y, dim,
        out.stride(0), x.stride(0), x.stride(1), S=s, BLOCK_D=block_d, num_warps=4)
    return y


def supports_mhc(spec: dict) -> bool:
    """CUDA SM90+; ``hc_mult`` (optional) a power of two >= 4; ``hidden_size`` (optional) % 32."""
    hc = spec.get("hc_mult", 4)
    return (quant_act.is_cuda_sm90_plus(spec) and hc >= 4 and hc & (hc - 1) == 0
            and spec.get("hidden_size", 32) % 32 == 0)
