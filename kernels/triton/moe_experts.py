"""Routed SwiGLU experts as grouped GEMMs over MXFP4 (or FP8) weights (model-spec §2.8, §4.3).

Semantics (reference ``moe.moe_routed_experts`` / ``expert_ffn``), per (token t, slot k) pair with
expert e = ids[t, k] and routing weight r = weights[t, k]:
    g = act(Q8_32(x_t) @ W1_e^T);  u = act(Q8_32(x_t) @ W3_e^T)         act = round to x.dtype
    h = act(r * silu(min(g, limit)) * clamp(u, -limit, limit))
    y_tk = act(Q8_32(h) @ W2_e^T);   out_t = sum over k of y_tk in increasing expert id (fp32)

Three launches after the activation quantizer (quant_act), all grouped over experts:
  1. ``_moe_gemm_kernel`` GATED: one program per (block of BM pairs of one expert, BN columns of I);
     W1 and W3 tiles share the A tile; epilogue = rounding, SwiGLU with limit, routing weight,
     and the Q8_32 quantization of h for the down projection (h is stored as e4m3 + ue8m0).
  2. ``_moe_gemm_kernel`` not GATED: the down projection from h's codes, y stored per pair.
  3. ``_moe_combine_kernel``: out_t = ordered fp32 sum of the token's top-k rows of y
     (deterministic, the reference's expert-id order, no atomics).

Weight formats (``ExpertWeights.fmt``; the containers and re-encodings live in moe_weights.py,
the MXFP4 unpack's PTX and tl twin in mxfp4_unpack.py), dequantized in the kernel's K loop:
  "mxfp4"  int8 (E, O, I/2) two e2m1 per byte + ue8m0 (E, O, I/32): each K step loads one
           contiguous slab of BK/2 bytes per weight row; the nibbles' bits are moved into e4m3
           (or fp32) bits with integer ops (e2m1 ⊂ e4m3, exact) and fed to an FP8 ``tl.dot``
           whose fp32 result gets the per-(row, 32 K) power-of-two scales (W4A8, mma="fp8"), or
           unpacked to exactly scaled bf16 (W4A16 style, mma="bf16", the default at every size:
           at decode the unpacking, not the MMA, is the bottleneck): four bytes per inline-PTX
           call (prmt, shifts, masks and one bf16x2 multiply — two where a program's scale
           bytes exceed 128: ~3 instructions per weight),
           the low and high nibbles kept apart as the even and odd K elements, each dotted
           with A's even or odd columns (no interleave). (Tiles with the weight rows on the
           MMA's M side, SWAP_AB, were measured slower and removed: code at commit bf55292.)
           Bytes in word order (``ExpertWeights.word_order`` / ``Mxfp4ExpertWeights.word_order``,
           the runtime's stacks on SM90: ``mxfp4_words``) take rotations instead (W_WORDS).
  "fp8"    e4m3 (E, O, I) + ue8m0 (E, ceil(O/scale_rows), I/32): the lossless load-time re-encoding
           of MXFP4 (``mxfp4_to_fp8``; 2× the bytes, no unpacking) with scale_rows=1, or a dense
           32×32-tile FP8 weight (the shared expert) with scale_rows=32.
  plain    a float tensor (E, O, I) of exactly dequantized values (bf16 dot).
Pairs are grouped per expert by ``moe_align.align_pairs`` (one Triton launch; the torch
``_align_pairs`` here is its reference and the interpreter's path; no host sync; the
equivalent of vLLM's moe_align_block_size).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.kernels.mxfp4_w4a8_order import TILE_ROWS
from deepinfer.kernels.quantized import Fp8BlockWeight, Mxfp4ExpertWeights
from deepinfer.kernels.triton import moe_align, mxfp4_unpack, quant_act, shared_expert
from deepinfer.kernels.triton.gemm_fp8 import is_interpreting
from deepinfer.kernels.triton.host_cache import sm_major
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2
from deepinfer.kernels.triton.moe_swiglu import ACT_CODES as _ACT_CODES
from deepinfer.kernels.triton.moe_swiglu import swiglu_h
from deepinfer.kernels.triton.moe_weights import (  # noqa: F401  (re-exported: the op's API)
    ExpertWeights,
    fp8_block_experts,
    mxfp4_to_fp8,
    mxfp4_to_w4a8_order,
    mxfp4_to_word_order,
    pack_mxfp4_experts,
)
from deepinfer.kernels.triton.quant_act import q8_32_groups, ue8m0_to_f32

FMT_MXFP4, FMT_FP8, FMT_PLAIN = 0, 1, 2


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def _load_w_tile(w_ptr, s_ptr, rows_w, stride_wn, stride_sn, k0,
                 FMT: tl.constexpr, SCALE_ROWS: tl.constexpr, AS_F32: tl.constexpr,
                 BN: tl.constexpr, BK: tl.constexpr):
    """K elements [k0, k0 + BK) of BN weight rows, each row's slab in ONE contiguous load.

    Returns (w [BN, BK], scale [BN, BK // 32] fp32): the weight is w * scale per 32-K block.
    MXFP4 nibbles (s e1 e0 m) are moved into float bits as they are, no lookup, exact for normal
    and subnormal e2m1 alike: AS_F32 (folded bf16 dots with SPLIT_K off — only the benches'
    comparison tilings now; ``moe_config`` takes ``mxfp4_unpack.unpack_mxfp4_halves``) into
    fp32 bits s|0..0 e1 e0|m|0.., i.e. value * 2^-126, times 2^126;
    else into e4m3 bits s 0 0 e1 e0 m 0 0 = value * 2^-6 (FP8 dots), the 2^6 going into the
    scale. FP8 weights: e4m3 codes; plain: the float values, scale 1.
    """
    NB: tl.constexpr = BK // 32
    if FMT == 0 and AS_F32:  # [BN, BK/2] packed bytes -> [BN, BK/2, 2] fp32 -> [BN, BK]
        p = tl.load(w_ptr + rows_w[:, None] * stride_wn + k0 // 2
                    + tl.arange(0, BK // 2)[None, :]).to(tl.int32)
        lo = ((p & 0x7) << 22) | ((p & 0x8) << 28)  # element 2j: low nibble
        hi = ((p & 0x70) << 18) | ((p & 0x80) << 24)  # element 2j + 1: high nibble
        w = tl.reshape(tl.join(lo, hi), (BN, BK)).to(tl.float32, bitcast=True) * 2.0**126
    elif FMT == 0:  # [BN, BK/2] packed bytes -> [BN, BK/2, 2] e4m3 bytes -> [BN, BK]
        p = tl.load(w_ptr + rows_w[:, None] * stride_wn + k0 // 2
                    + tl.arange(0, BK // 2)[None, :]).to(tl.int32)
        lo = ((p << 2) & 0x1C) | ((p << 4) & 0x80)  # element 2j: low nibble
        hi = ((p >> 2) & 0x1C) | (p & 0x80)  # element 2j + 1: high nibble
        w = tl.reshape(tl.join(lo, hi), (BN, BK)).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
    elif FMT == 1:
        w = tl.load(w_ptr + rows_w[:, None] * stride_wn + k0 + tl.arange(0, BK)[None, :])
        w = w.to(tl.float8e4nv, bitcast=True)
    else:
        w = tl.load(w_ptr + rows_w[:, None] * stride_wn + k0 + tl.arange(0, BK)[None, :])
    if FMT == 2:
        scale = tl.full((BN, NB), 1.0, tl.float32)
    else:
        scale = ue8m0_to_f32(tl.load(s_ptr + (rows_w // SCALE_ROWS)[:, None] * stride_sn
                                     + k0 // 32 + tl.arange(0, NB)[None, :]))
        if FMT == 0 and not AS_F32:
            scale = scale * 64.0
    return w, scale


_W4A8_TILE = tl.constexpr(TILE_ROWS)  # rows per step tile of the W4A8 order


@triton.jit
def _load_w4a8_tile(w_ptr, s_ptr, rows_w, stride_wn, stride_sn, k0, BN: tl.constexpr,
                    BK: tl.constexpr):
    """K elements [k0, k0 + 128) of BN rows stored in ``moe_gluon_w4a8``'s kernel order (step
    tiles of ``TILE_ROWS`` rows; word 4 q + G of a row's step: the nibbles of K = 32 G + 16 t +
    4 q + b as e4m3 bits, lo t = 0 and hi t = 1), returned like ``_load_w_tile``'s AS_F32 form:
    values * 2^-126 as fp32 [BN, BK] in natural K order (the same masks and rotations as the
    Gluon kernel's unpack, then the e4m3 bits s|..|e1 e0 m|.. moved into fp32 bits), and the
    fp32 scales [BN, BK // 32]."""
    tl.static_assert(BK == 128, "W4A8 kernel order: one 128-K step per tile")
    g = tl.arange(0, 4)
    q = tl.arange(0, 4)
    woff = (q[None, :] * 4 + g[:, None]) * 4  # [G, q] byte offsets of the words in a step
    # the order's step tiles: (O / T, K / 128, T, 64) bytes per expert (w_ptr: its start)
    row_off = ((rows_w // _W4A8_TILE) * _W4A8_TILE * stride_wn + (k0 // 128) * (_W4A8_TILE * 64)
               + (rows_w % _W4A8_TILE) * 64)
    ptrs = (w_ptr + row_off[:, None, None] + woff[None, :, :])
    words = tl.load(ptrs.to(tl.pointer_type(tl.int32))).to(tl.uint32, bitcast=True)
    lo = words & 0x9C9C9C9C
    hi = ((((words << 2) | (words >> 30)) & 0x88888888)
          | (((words << 4) | (words >> 28)) & 0x14141414))
    vals = tl.join(_w4a8_bytes(lo), _w4a8_bytes(hi))  # [BN, G, q, b, t]
    vals = tl.reshape(tl.permute(vals, (0, 1, 4, 2, 3)), (BN, BK))  # K = 32 G + 16 t + 4 q + b
    scale = ue8m0_to_f32(tl.load(s_ptr + rows_w[:, None] * stride_sn + k0 // 32
                                 + tl.arange(0, BK // 32)[None, :]))
    return vals * 2.0**126, scale


@triton.jit
def _e4m3_bits_to_f32_bits(c):
    """A byte c (uint32) with s at bit 7 and e1 e0 m at bits 4..2 -> fp32 bits of value *
    2^-126: s at 31, e1 e0 m at 24..22 (subnormal for e = 0: exact, as ``_load_w_tile``)."""
    return ((c & 0x1C) << 20) | ((c & 0x80) << 24)


@triton.jit
def _w4a8_bytes(t):
    """uint32 words [BN, 4, 4] of four e4m3-positioned bytes -> their values * 2^-126 as fp32
    [BN, 4, 4, 4] (byte b at index b)."""
    b01 = tl.join(_e4m3_bits_to_f32_bits(t & 0xFF), _e4m3_bits_to_f32_bits((t >> 8) & 0xFF))
    b23 = tl.join(_e4m3_bits_to_f32_bits((t >> 16) & 0xFF),
                  _e4m3_bits_to_f32_bits((t >> 24) & 0xFF))
    b = tl.permute(tl.join(b01, b23), (0, 1, 2, 4, 3))  # [.., h, u]: byte 2 h + u
    return tl.reshape(b, (t.shape[0], t.shape[1], t.shape[2], 4)).to(tl.float32, bitcast=True)


@triton.jit
def _mxfp4_step(acc1, acc3, a_even, a_odd, p1, e1, p3, e3, GATED: tl.constexpr,
                DOT_BF16: tl.constexpr, ONE_MUL: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr, WORDS: tl.constexpr = False):
    """One K step of the split MXFP4 tiles: unpack w1 (and w3 when GATED), two dots each."""
    w_even, w_odd = mxfp4_unpack.unpack_mxfp4_halves(p1, e1, DOT_BF16, ONE_MUL, BN, BK, WORDS)
    acc1 = _dot_halves(acc1, a_even, a_odd, w_even, w_odd, DOT_BF16)
    if GATED:
        w_even, w_odd = mxfp4_unpack.unpack_mxfp4_halves(p3, e3, DOT_BF16, ONE_MUL, BN, BK, WORDS)
        acc3 = _dot_halves(acc3, a_even, a_odd, w_even, w_odd, DOT_BF16)
    return acc1, acc3


@triton.jit
def _scaled(v, scale, ROWS: tl.constexpr, BK: tl.constexpr):
    """v [ROWS, BK] * scale [ROWS, BK // 32] broadcast over each 32-K block, fp32."""
    v = tl.reshape(v.to(tl.float32), (ROWS, BK // 32, 32)) * scale[:, :, None]
    return tl.reshape(v, (ROWS, BK))


@triton.jit
def _a_operand(a, a_scale, MMA_FP8: tl.constexpr, DOT_BF16: tl.constexpr, BM: tl.constexpr,
               BK: tl.constexpr):
    """The dot's A operand [BM, BK]: e4m3 codes as they are (MMA_FP8), else the exact values
    code * 2^s in bf16 (fp32 under the interpreter)."""
    if not MMA_FP8:
        a = _scaled(a, a_scale, BM, BK)
        if DOT_BF16:
            a = a.to(tl.bfloat16)
    return a


@triton.jit
def _dot_tile(acc, a, a_scale, w, w_scale, MMA_FP8: tl.constexpr, DOT_BF16: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """acc [BM, BN] += (a * a_scale) [BM, BK] @ (w * w_scale)^T [BK, BN], scales per 32 K.

    MMA_FP8 (BK = 32): an FP8 dot of the codes, its fp32 product promoted with the two scales.
    Otherwise ``a`` holds ``_a_operand``'s exact values and the exact power-of-two weight scales
    are folded into the operand too (e2m1/e4m3 × 2^s is exact in bf16, products are exact in
    fp32): ONE dot covers all BK, no per-block promotion.
    """
    if MMA_FP8:
        tl.static_assert(BK == 32, "FP8 dots promote per 32-K block: BK must be 32")
        acc += tl.dot(a, tl.trans(w)) * (a_scale * tl.trans(w_scale))  # [BM, 1] * [1, BN]
    else:
        w_val = tl.trans(_scaled(w, w_scale, BN, BK))
        if DOT_BF16:
            acc = tl.dot(a, w_val.to(tl.bfloat16), acc)
        else:
            acc = tl.dot(a, w_val, acc, input_precision="ieee")
    return acc


@triton.jit
def _dot_halves(acc, a_even, a_odd, w_even, w_odd, DOT_BF16: tl.constexpr):
    """acc [BM, BN] += a_even @ w_even^T + a_odd @ w_odd^T (the K elements split by parity)."""
    prec: tl.constexpr = "tf32" if DOT_BF16 else "ieee"
    acc = tl.dot(a_even, tl.trans(w_even), acc, input_precision=prec)
    acc = tl.dot(a_odd, tl.trans(w_odd), acc, input_precision=prec)
    return acc


@triton.jit
def _moe_k_loop(acc1, acc3, a_ptrs, a_scale_ptrs, w1_base, s1_base, w3_base, s3_base, rows_w,
                stride_wn, stride_sn, K, GATED: tl.constexpr, FMT: tl.constexpr,
                SCALE_ROWS: tl.constexpr, MMA_FP8: tl.constexpr, DOT_BF16: tl.constexpr,
                SPLIT_K: tl.constexpr, A_BF16: tl.constexpr,
                ONE_MUL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                STAGES: tl.constexpr = None, WORDS: tl.constexpr = False,
                W4A8: tl.constexpr = False):
    """``_moe_gemm_kernel``'s K loop: acc1 (and acc3 when GATED) += A @ W^T over K; STAGES:
    this loop's software-pipeline depth (None: the launch's num_stages); WORDS: MXFP4 weights
    in word order (``mxfp4_words``); W4A8: in ``moe_gluon_w4a8``'s kernel order (folded tiles,
    BK = 128)."""
    for k0 in tl.range(0, K, BK, num_stages=STAGES):
        if A_BF16:
            a = tl.load(a_ptrs + k0)  # [BM, BK] exact Q8_32 values
            a_scale = a  # unused
            a = a.to(tl.bfloat16) if DOT_BF16 else a.to(tl.float32)
        else:
            a = tl.load(a_ptrs + k0).to(tl.float8e4nv, bitcast=True)  # [BM, BK]
            a_scale = ue8m0_to_f32(tl.load(a_scale_ptrs + k0 // 32))  # [BM, BK // 32]
            a = _a_operand(a, a_scale, MMA_FP8, DOT_BF16, BM, BK)
        if SPLIT_K:  # MXFP4 decode tiles: even and odd K elements apart, two dots each
            a_even, a_odd = tl.split(tl.reshape(a, (BM, BK // 2, 2)))
            p1, e1 = mxfp4_unpack.load_mxfp4_raw(w1_base, s1_base, rows_w, stride_wn, stride_sn,
                                                 k0, BN, BK)
            p3, e3 = p1, e1
            if GATED:
                p3, e3 = mxfp4_unpack.load_mxfp4_raw(w3_base, s3_base, rows_w, stride_wn,
                                                     stride_sn, k0, BN, BK)
            acc1, acc3 = _mxfp4_step(acc1, acc3, a_even, a_odd, p1, e1, p3, e3, GATED,
                                     DOT_BF16, ONE_MUL, BN, BK, WORDS)
        elif W4A8:
            w1, s1 = _load_w4a8_tile(w1_base, s1_base, rows_w, stride_wn, stride_sn, k0, BN, BK)
            acc1 = _dot_tile(acc1, a, a_scale, w1, s1, MMA_FP8, DOT_BF16, BM, BN, BK)
            if GATED:
                w3, s3 = _load_w4a8_tile(w3_base, s3_base, rows_w, stride_wn, stride_sn, k0,
                                         BN, BK)
                acc3 = _dot_tile(acc3, a, a_scale, w3, s3, MMA_FP8, DOT_BF16, BM, BN, BK)
        else:
            w1, s1 = _load_w_tile(w1_base, s1_base, rows_w, stride_wn, stride_sn, k0,
                                  FMT, SCALE_ROWS, not MMA_FP8, BN, BK)
            acc1 = _dot_tile(acc1, a, a_scale, w1, s1, MMA_FP8, DOT_BF16, BM, BN, BK)
            if GATED:
                w3, s3 = _load_w_tile(w3_base, s3_base, rows_w, stride_wn, stride_sn, k0,
                                      FMT, SCALE_ROWS, not MMA_FP8, BN, BK)
                acc3 = _dot_tile(acc3, a, a_scale, w3, s3, MMA_FP8, DOT_BF16, BM, BN, BK)

    return acc1, acc3


@triton.jit
def _moe_gemm_kernel(
    a_ptr, a_scale_ptr,  # uint8 A codes (rows, K) + ue8m0 (rows, K/32)
    w1_ptr, s1_ptr, w3_ptr, s3_ptr,  # expert weights (E, O, ...) and their scales (E, ., K/32)
    sorted_pairs_ptr, block_expert_ptr,  # int32 (num_blocks*BM,), int32 (num_blocks,)
    route_w_ptr,  # fp32 (num_pairs,) routing weights (GATED only)
    out_ptr, out_scale_ptr,  # GATED: uint8 h codes (num_pairs, O) + ue8m0; else y (num_pairs, O)
    num_pairs, O, K, a_row_div, limit,
    stride_am, stride_asm, stride_we, stride_wn, stride_se, stride_sn, stride_om, stride_osm,
    GATED: tl.constexpr, FMT: tl.constexpr, SCALE_ROWS: tl.constexpr, MMA_FP8: tl.constexpr,
    DOT_BF16: tl.constexpr, ACT: tl.constexpr, SPLIT_K: tl.constexpr,
    A_BF16: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    W_ONE_MUL: tl.constexpr = 0, W_WORDS: tl.constexpr = False, W_W4A8: tl.constexpr = False,
):
    """One program: BM pairs of one expert × BN output columns; K in steps of BK (K % BK == 0).
    A_BF16 (folded dots only): A holds the Q8_32-rounded values themselves (bf16, exact; a_scale
    unused), not codes + scales — no per-program decode of A, which every program of a decode
    tile would repeat for its BN columns — and GATED writes h the same way (out_scale unused).
    W_ONE_MUL (SPLIT_K MXFP4 tiles on the GPU): one bf16x2 multiply per weight pair — 1 (or
    True): in programs whose scale bytes allow it (``mxfp4_unpack.scales_fit_one_mul``, once
    per program, two copies of the K loop); 2: everywhere, the caller vouching that every
    scale byte of the weights is <= 128 (``ExpertWeights.scale_max``: no check, one loop,
    fewer registers). W_WORDS: MXFP4 weights in word order (``mxfp4_words``). W_W4A8: in
    ``moe_gluon_w4a8``'s kernel order (folded tiles only, BK = 128)."""
    block = tl.program_id(0)
    expert = tl.load(block_expert_ptr + block)
    if expert < 0:
        return
    pairs = tl.load(sorted_pairs_ptr + block * BM + tl.arange(0, BM))  # [BM]; padding = num_pairs
    valid = pairs < num_pairs
    pairs = tl.where(valid, pairs, 0)
    rows_a = (pairs // a_row_div).to(tl.int64)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    mask_n = offs_n < O
    rows_w = tl.where(mask_n, offs_n, 0)

    a_ptrs = a_ptr + rows_a[:, None] * stride_am + tl.arange(0, BK)[None, :]  # [BM, BK]
    a_scale_ptrs = a_scale_ptr + rows_a[:, None] * stride_asm + tl.arange(0, BK // 32)[None, :]
    w1_base = w1_ptr + expert.to(tl.int64) * stride_we
    s1_base = s1_ptr + expert.to(tl.int64) * stride_se
    w3_base = w3_ptr + expert.to(tl.int64) * stride_we
    s3_base = s3_ptr + expert.to(tl.int64) * stride_se

    acc1 = tl.zeros((BM, BN), dtype=tl.float32)
    acc3 = tl.zeros((BM, BN), dtype=tl.float32)
    tl.static_assert(not (A_BF16 and MMA_FP8), "A_BF16 feeds the folded (bf16) dots only")
    if SPLIT_K and W_ONE_MUL == 2 and DOT_BF16:  # the caller vouches for the scales
        acc1, acc3 = _moe_k_loop(acc1, acc3, a_ptrs, a_scale_ptrs, w1_base, s1_base, w3_base,
                                 s3_base, rows_w, stride_wn, stride_sn, K, GATED, FMT, SCALE_ROWS,
                                 MMA_FP8, DOT_BF16, SPLIT_K, A_BF16, True, BM, BN, BK,
                                 WORDS=W_WORDS)
    elif SPLIT_K and W_ONE_MUL and DOT_BF16:
        # one bf16x2 multiply per weight pair where the scales allow it (real checkpoints' weight
        # scales are far below 2): two copies of the loop (a branch inside one loop would cost
        # its cp.async pipelining); the fallback runs unpipelined, so that its buffers do not
        # double the shared memory (occupancy) of the loop that runs
        if mxfp4_unpack.scales_fit_one_mul(s1_base, s3_base, rows_w, stride_sn, K, GATED, BN):
            acc1, acc3 = _moe_k_loop(acc1, acc3, a_ptrs, a_scale_ptrs, w1_base, s1_base, w3_base,
                                     s3_base, rows_w, stride_wn, stride_sn, K, GATED, FMT,
                                     SCALE_ROWS, MMA_FP8, DOT_BF16, SPLIT_K, A_BF16,
                                     True, BM, BN, BK, WORDS=W_WORDS)
        else:
            acc1, acc3 = _moe_k_loop(acc1, acc3, a_ptrs, a_scale_ptrs, w1_base, s1_base, w3_base,
                                     s3_base, rows_w, stride_wn, stride_sn, K, GATED, FMT,
                                     SCALE_ROWS, MMA_FP8, DOT_BF16, SPLIT_K, A_BF16,
                                     False, BM, BN, BK, 1, WORDS=W_WORDS)
    else:
        tl.static_assert(not W_W4A8 or not (SPLIT_K or MMA_FP8), "W4A8 order: folded tiles")
        acc1, acc3 = _moe_k_loop(acc1, acc3, a_ptrs, a_scale_ptrs, w1_base, s1_base, w3_base,
                                 s3_base, rows_w, stride_wn, stride_sn, K, GATED, FMT, SCALE_ROWS,
                                 MMA_FP8, DOT_BF16, SPLIT_K, A_BF16, False, BM, BN, BK,
                                 WORDS=W_WORDS, W4A8=W_W4A8)

    pairs64 = pairs.to(tl.int64)
    store_mask = valid[:, None] & mask_n[None, :]
    if GATED:
        h = swiglu_h(acc1, acc3, tl.load(route_w_ptr + pairs)[:, None], limit, ACT)
        # Q8_32 of h for the down projection: BN columns = BN/32 scale blocks per row
        codes, e = q8_32_groups(tl.reshape(h, (BM, BN // 32, 32)), 2)
        if A_BF16:  # code * 2^(e - 127), exact in fp32 and in out's dtype
            vals = codes.to(tl.float32) * ue8m0_to_f32(e.to(tl.uint8))
            tl.store(out_ptr + pairs64[:, None] * stride_om + offs_n[None, :],
                     tl.reshape(vals, (BM, BN)).to(out_ptr.dtype.element_ty), mask=store_mask)
        else:
            codes = tl.reshape(codes, (BM, BN))
            tl.store(out_ptr + pairs64[:, None] * stride_om + offs_n[None, :],
                     codes.to(tl.uint8, bitcast=True), mask=store_mask)
            groups = tl.program_id(1) * (BN // 32) + tl.arange(0, BN // 32)
            tl.store(out_scale_ptr + pairs64[:, None] * stride_osm + groups[None, :],
                     tl.reshape(e, (BM, BN // 32)).to(tl.uint8),
                     mask=valid[:, None] & (groups[None, :] < O // 32))
    else:
        tl.store(out_ptr + pairs64[:, None] * stride_om + offs_n[None, :],
                 acc1.to(out_ptr.dtype.element_ty), mask=store_mask)


@triton.jit
def _moe_combine_kernel(y_ptr, ids_ptr, res_ptr, out_ptr, D, stride_ym, stride_rm, stride_om,
                        TOPK: tl.constexpr, KP: tl.constexpr, BLOCK_D: tl.constexpr,
                        HAS_RES: tl.constexpr, OUT_BF16_BITS: tl.constexpr):
    """out[t] = sum over the token's TOPK rows of y, in increasing expert id, fp32 from 0; with
    HAS_RES, + res[t] (the shared expert's output) in fp32, stored in out's dtype (rounded
    once: torch's ``(sum + res).to(res.dtype)``). OUT_BF16_BITS: out is a bf16 buffer seen
    as int16, rounded to nearest even by integer ops (the interpreter's fp32 -> bf16 cast
    truncates; the GPU's rounds to nearest even: both give torch's bits this way)."""
    t = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    slot = tl.arange(0, KP)
    ids = tl.load(ids_ptr + t * TOPK + slot, mask=slot < TOPK, other=2**30).to(tl.int32)
    other = tl.arange(0, KP)
    other_ids = tl.load(ids_ptr + t * TOPK + other, mask=other < TOPK, other=2**30).to(tl.int32)
    # rank of each slot by expert id (ids within a token are distinct; ties by slot for safety)
    before = (other_ids[None, :] < ids[:, None]) | ((other_ids[None, :] == ids[:, None])
                                                   & (other[None, :] < slot[:, None]))
    rank = tl.sum(before.to(tl.int32), axis=1)  # [KP]
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for r in tl.static_range(TOPK):
        s = tl.sum(tl.where(rank == r, slot, 0), axis=0)
        y = tl.load(y_ptr + (t * TOPK + s) * stride_ym + offs_d, mask=mask_d, other=0.0)
        acc += y.to(tl.float32)
    if HAS_RES:
        acc += tl.load(res_ptr + t * stride_rm + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    if OUT_BF16_BITS:  # round to nearest even: + 0x7FFF + the kept lowest bit, keep 16 bits
        bits = acc.to(tl.uint32, bitcast=True)
        bits = tl.where(acc != acc, 0x7FC00000, bits)  # NaN -> 0x7FC0, as torch
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        tl.store(out_ptr + t * stride_om + offs_d, bits.to(tl.uint16).to(tl.int16, bitcast=True),
                 mask=mask_d)
    else:
        tl.store(out_ptr + t * stride_om + offs_d, acc.to(out_ptr.dtype.element_ty), mask=mask_d)


# ---------------------------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------------------------


def _align_pairs(expert_ids: torch.Tensor, num_experts: int, block_m: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Group (token, slot) pairs by expert into blocks of block_m rows, without a host sync.

    Returns sorted_pairs int32 (num_blocks * block_m,): pair ids (t * topk + k) expert by expert,
    each expert padded to a multiple of block_m with the sentinel num_pairs; block_expert int32
    (num_blocks,): the expert of each block, -1 past the last used block. num_blocks is the static
    bound cdiv(num_pairs, block_m) + min(num_experts + 1, num_pairs).
    Ids outside [0, num_experts) (another EP rank's experts) go to an extra bucket whose blocks
    get expert -1, i.e. they are skipped.
    """
    flat = expert_ids.reshape(-1).to(torch.int64)
    flat = torch.where((flat >= 0) & (flat < num_experts), flat, num_experts)
    num_pairs = flat.numel()
    num_blocks = cdiv(num_pairs, block_m) + min(num_experts + 1, num_pairs)
    counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=flat.device)
    counts.index_add_(0, flat, torch.ones_like(flat))  # bincount would sync on its max
    blocks_per_expert = (counts + block_m - 1) // block_m
    block_end = torch.cumsum(blocks_per_expert, 0)
    first_row = (block_end - blocks_per_expert) * block_m
    first_pair = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    rank = torch.arange(num_pairs, device=flat.device) - first_pair[expert_of]
    sorted_pairs = torch.full((num_blocks * block_m,), num_pairs, dtype=torch.int32,
                              device=flat.device)
    sorted_pairs[first_row[expert_of] + rank] = order.to(torch.int32)
    block_ids = torch.arange(num_blocks, device=flat.device)
    block_expert = torch.searchsorted(block_end, block_ids, right=True)
    block_expert = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    return sorted_pairs, block_expert


def moe_config(num_pairs: int, num_experts: int, interpret: bool = False,
               plain: bool = False, mma: str = "auto", fp8_weights: bool = False) -> dict:
    """One tile config per shape class and dot kind; MMA_FP8 says which dot the kernel uses.

    Decode (num_pairs <= 16 * num_experts: an expert sees ~1-16 rows) is weight-bandwidth bound:
    BM=16 rows (mma.sync; wgmma needs M=64), one 128-byte slab per weight row and K step (BK=256
    MXFP4, 128 FP8 e4m3, 64 plain bf16), scales folded into bf16 operands (one dot per step, no
    promotion, fewest instructions per weight byte); mma="fp8" keeps FP8 dots there (BK=32, per-32
    promotion: the former decode config, kept for comparison). Prefill: mma="auto"
    takes FP8 dots for FP8 weights and the folded bf16 dot for MXFP4 (faster on the H200), the
    latter at BM=64 with the split unpack (a 4K chunk gives each expert ~64 rows).
    Register and shared-memory use of each are checked by the SM90 compile test (no spills).
    """
    decode = num_pairs <= 16 * num_experts
    # auto: FP8 dots only for FP8 weights at prefill; MXFP4 takes the folded bf16 dot at every
    # size (measured on the H200, docs/performance.md: W4A16 beat W4A8 from 64 to 4096 tokens)
    mma_fp8 = not plain and (mma == "fp8" or (mma == "auto" and not decode and fp8_weights))
    # MXFP4 folded: tiles unpack by inline PTX into even/odd halves (SPLIT_K): decode measured
    # 11-40 % faster on the H200 than the interleaved fp32-bits unpack; prefill at BM=64 x BN=64
    # x BK=128 12.9 ms vs 19.2 ms (BM=128 x 64 x 32 interleaved) per 4K-token layer
    # (bench/moe_decode.py --configs: a 4K chunk routes ~64 pairs per expert, BM=128 idles half)
    mxfp4_folded = not plain and not fp8_weights and not mma_fp8
    if interpret:
        return dict(BM=16, BN=32, BK=32 if mma_fp8 else 64, MMA_FP8=mma_fp8,
                    SPLIT_K=mxfp4_folded, A_BF16=mxfp4_folded, W_ONE_MUL=False,
                    num_warps=4, num_stages=1)
    # MXFP4 decode: A as bf16 values (A_BF16) at BN=64 x 4 stages, 3.15 ms per 64-token slice
    # layer vs 3.50 (codes + scales, BN=128 x 3 stages; the best in round 11) and 4.17 (codes,
    # BN=64 x 4) on the H200 (session 6 round 14; swapped tiles were slower at decode); with
    # W_ONE_MUL 3.51 vs 3.71 ms in one later run (round 16; runs differ by up to 15 %)
    # Session 7 (Nsight Compute in round 18 saw 2 programs per SM and the gated kernel
    # issue-bound): with vouched scales (W_ONE_MUL 2, ``ExpertSlots.scale_max``) 2.84 vs 3.31 ms
    # at 64 tokens, capped at 168 registers (3 programs per SM) 2.74 (round 19); the down
    # projection at BN=128 x BK=128 (4 programs per SM, twice the work per program): with the
    # cap 2.27 vs 2.40 ms at 64 tokens and 3.35 vs 3.53 at 256 (round 21; round 19 without the
    # cap: 3.54 vs 3.85 at 256, 2.93 vs 2.84 at 64). 8-warp tiles under a 128 cap lost by 17-35 %.
    if decode and mxfp4_folded:
        return dict(BM=16, BN=64, BK=256, MMA_FP8=False, SPLIT_K=True,
                    A_BF16=True, W_ONE_MUL=True, num_warps=4, num_stages=4, maxnreg=168,
                    DOWN=dict(BN=128, BK=128, num_warps=4, num_stages=4, maxnreg=None))
    if decode and not mma_fp8:
        return dict(BM=16, BN=64, BK=64 if plain else 128, MMA_FP8=False, SPLIT_K=False,
                    A_BF16=False, W_ONE_MUL=False, num_warps=4, num_stages=4)
    if decode:
        return dict(BM=64, BN=128, BK=32, MMA_FP8=True, SPLIT_K=False,
                    A_BF16=False, W_ONE_MUL=False, num_warps=8, num_stages=6)
    # prefill: 64 x 64 x 128 with A as bf16 values, 12.23 ms per 4K-token slice layer vs 12.41
    # (codes + scales) and 12.90 (swapped operands, BN=128 weight rows as the wgmma M side: the
    # round-11 winner by 0.2 ms, slower in round 14) on the H200 (session 6); W_ONE_MUL 12.77 vs
    # 13.24 ms in one run (round 16)
    if mxfp4_folded:
        return dict(BM=64, BN=64, BK=128, MMA_FP8=False, SPLIT_K=True,
                    A_BF16=True, W_ONE_MUL=True, num_warps=4, num_stages=4)
    return dict(BM=128, BN=64, BK=32, MMA_FP8=mma_fp8, SPLIT_K=False,
                A_BF16=False, W_ONE_MUL=False, num_warps=8, num_stages=4 if plain else 6)


def _block_k(k: int, block_k: int) -> int:
    """The largest BK <= block_k (halving, down to 32) that divides K: the K loop has no mask."""
    while k % block_k:
        block_k //= 2
    return block_k


def _weight_args(w) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """(data, scale, FMT, SCALE_ROWS) for a launch; plain tensors pass themselves as scale.
    The byte order goes separately (``_word_order``): the bytes are passed as they are."""
    if isinstance(w, Mxfp4ExpertWeights):  # the runtime's resident form (kernels/quantized.py)
        return w.packed.view(torch.uint8), w.scale.view(torch.uint8), FMT_MXFP4, 1
    if isinstance(w, ExpertWeights):
        data = w.data.view(torch.uint8)
        return data, w.scale.view(torch.uint8), (FMT_MXFP4 if w.fmt == "mxfp4" else FMT_FP8), \
            w.scale_rows
    return w, w, FMT_PLAIN, 1


def _w4a8_gluon(x: torch.Tensor, interpret: bool, skip_foreign_ids: bool,
                config: dict | None) -> bool:
    """Whether W4A8-order weights take the Gluon kernels (``run_experts_w4a8`` at decode
    sizes, ``run_experts_w4a16_prefill`` above): an SM90 GPU with Gluon, every id local (their
    unwritten rows are not zeroed), no tiling override; otherwise the folded Triton tiles
    read the order."""
    from deepinfer.kernels.triton.moe_gluon import HAS_GLUON

    return (HAS_GLUON and not interpret and x.is_cuda and not skip_foreign_ids
            and config is None and sm_major(x.device) == 9)


def _word_order(w) -> bool:
    """Whether ``w``'s MXFP4 bytes are in word order (the kernels' W_WORDS): the runtime's
    ``Mxfp4ExpertWeights.word_order`` (``ExpertSlots`` in word-order mode) maps to
    ``ExpertWeights.word_order`` as is — no conversion per call."""
    return isinstance(w, Mxfp4ExpertWeights | ExpertWeights) and w.word_order


def _reg_cap(cfg: dict, one_mul_mode: int) -> dict:
    """The launch's register cap (Triton's maxnreg) where the config sets one, for the vouched
    one-loop kernel it was measured on (W_ONE_MUL 2): fewer registers per thread, more programs
    per SM (SM90: 65,536 registers; 3 programs of 128 threads at <= 168)."""
    return {"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") and one_mul_mode == 2 else {}


def _one_mul_mode(wanted, *weights) -> int:
    """The kernel's W_ONE_MUL for MXFP4 ``weights`` when the config asks for it (``wanted``): 2
    where every tensor's known ``scale_max`` is <= 128 (or the config says 2: benchmarks on
    weights made so), else 1 (a per-program check) where the scales can be read word-wise,
    else 0."""
    if not wanted:
        return 0
    if wanted == 2 or all(getattr(w, "scale_max", None) is not None and w.scale_max <= 128
                          for w in weights):
        return 2
    return 1 if mxfp4_unpack.word_scales(*(_weight_args(w)[1] for w in weights)) else 0


# the ordered combine's program (``combine_pairs``): columns of one token, warps (H200, session
# 38 round 187, bench/rest_kernels.py at 4K tokens: 8 warps 84.1 µs against 4 warps' 89.5, the
# same bits — a program's columns only move between threads)
COMBINE_BLOCK_D, COMBINE_WARPS = 1024, 8
# W4A8 layout: the decode pipeline (``moe_gluon_w4a8``, 8 pairs per program) up to this many
# pairs per expert, the prefill pipeline above. H200 rounds 133a / 133b (one layer of the slice,
# the whole pipeline as a CUDA graph, ms; decode / bf16 prefill BM 64 / BM 128): 512 tokens (8
# pairs per expert) 2.84 / 3.48, 768 (12) 3.78 / 3.65, 1,024 (16) 4.47 / 3.78 / 4.20, 2,048
# (32) 8.06 / 4.64 / 4.80. Before session 23: 16 (a lone 1K prompt's experts in the decode
# pipeline: 33 of its 47 ms of GPU time, round 132a).
DECODE_MAX_PAIRS_PER_EXPERT = 10
# The bf16 prefill pipeline's pairs per program: 64 up to this many pairs per expert, its
# BLOCK_M (128) above (128 beat 64 at 4K and 16K tokens: session 15).
W4A16_BM64_MAX_PAIRS_PER_EXPERT = 32
# (W4A8 layout at prefill sizes: the FP8 prefill kernel ``moe_gluon_w4a8_prefill`` and its
# switches W4A8_PREFILL_KERNEL / W4A8_DECODE_PREFILL_BM were removed in session 42 — measured
# slower: H200 round 71a, 8.18 vs 11.21 ms at 4K tokens, 19.72 vs 36.50 at 16K — code at
# commit ad9ad7b.)


def run_experts(x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor, w1, w3, w2,
                limit: float, mma: str = "auto", combine: bool = True,
                skip_foreign_ids: bool = False,
                combine_ids: torch.Tensor | None = None,
                config: dict | None = None, x_rounded: bool = False) -> torch.Tensor:
    """The grouped expert pipeline. mma: "fp8" (W4A8/W8A8 FP8 dots), "bf16" (W4A16 style: scales
    folded into bf16 operands) or "auto" (bf16, except FP8 weights at prefill; ``moe_config``).

    Returns (N, D) fp32 (combine=True) or the per-pair outputs (N * topk, D) in x.dtype.
    skip_foreign_ids: pairs whose id is outside [0, E) (experts held by other EP ranks, with ids
    local to this rank's slots) are skipped and their per-pair outputs are 0 (one extra memset).
    combine_ids: (N, topk) ids that order each token's sum (default expert_ids): the logical
    experts when expert_ids name physical slots (replicas), so the sum keeps the logical order.
    config: entries replacing ``moe_config``'s (BM, BN, BK, SPLIT_K, A_BF16, W_ONE_MUL,
    num_warps, num_stages, maxnreg; DOWN: a dict of BN, BK, num_warps, num_stages, maxnreg for
    the down projection alone) — for benchmarks that compare tilings (bench/moe_decode.py
    --configs). x_rounded: x holds its Q8_32 values (the paths rounding x to values skip it;
    those taking codes and scales quantize it: the same values).
    """
    num_tokens, dim = x.shape
    topk = expert_ids.shape[1]
    d1, s1, fmt, scale_rows = _weight_args(w1)
    d3, s3, fmt3, _ = _weight_args(w3)
    d2, s2, fmt2, scale_rows2 = _weight_args(w2)
    assert fmt == fmt3 == fmt2, "moe: w1, w3 and w2 must share one format"
    num_experts, inter = d1.shape[0], d1.shape[1]
    assert dim % 32 == 0 and inter % 32 == 0, f"moe: D={dim} and I={inter} must be multiples of 32"
    num_pairs = num_tokens * topk
    out_shape = (num_tokens, dim) if combine else (num_pairs, dim)
    if num_pairs == 0:
        return torch.zeros(out_shape, dtype=torch.float32 if combine else x.dtype, device=x.device)
    interpret = is_interpreting()
    cfg = moe_config(num_pairs, num_experts, interpret, plain=fmt == FMT_PLAIN, mma=mma,
                     fp8_weights=fmt == FMT_FP8)
    w4a8 = [isinstance(w, ExpertWeights | Mxfp4ExpertWeights) and w.w4a8_order
            for w in (w1, w3, w2)]
    if any(w4a8):
        if not all(w4a8) or mma == "fp8":
            raise ValueError("moe: W4A8-order MXFP4 weights (mxfp4_to_w4a8_order) need all of "
                             "w1, w3, w2 in that order and mma='bf16' or 'auto'")
        if _w4a8_gluon(x, interpret, skip_foreign_ids, config):
            if num_pairs <= DECODE_MAX_PAIRS_PER_EXPERT * num_experts:  # 8 pairs per program
                from deepinfer.kernels.triton.moe_gluon_w4a8 import run_experts_w4a8
                return run_experts_w4a8(x, expert_ids, weights, w1, w3, w2, limit, combine_ids,
                                        combine=combine)
            from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as w4a16

            if w4a16.accepts(w1, w3, w2):  # else the folded tiles below
                few = num_pairs <= W4A16_BM64_MAX_PAIRS_PER_EXPERT * num_experts
                return w4a16.run_experts_w4a16_prefill(x, expert_ids, weights, w1, w3, w2,
                                                       limit, combine_ids, combine=combine,
                                                       block_m=64 if few else None,
                                                       x_rounded=x_rounded)
        # the folded tiles read the order (moe_gluon_w4a8's words -> natural K in registers)
        cfg.update(SPLIT_K=False, W_ONE_MUL=False, MMA_FP8=False, BK=128,
                   DOWN={**cfg.get("DOWN", {}), "BK": 128})
    cfg.update(config or {})
    mma_fp8 = cfg["MMA_FP8"]
    dot_bf16 = not interpret
    act = _ACT_CODES[x.dtype]
    # one Triton launch on the GPU (moe_align, bit-identical; ~36 torch launches otherwise:
    # 81 vs 6 us at 64 tokens on the H200); the interpreter keeps the torch version (faster there)
    align = _align_pairs if interpret else moe_align.align_pairs
    sorted_pairs, block_expert = align(expert_ids, num_experts, cfg["BM"])
    num_blocks = block_expert.numel()
    route_w = weights.reshape(-1).to(torch.float32).contiguous()

    # A_BF16: the rounded values in bf16 (fp32 for fp32 x; fp16 x keeps codes + scales: not
    # every Q8_32 value is an fp16 value)
    a_bf16 = cfg["A_BF16"] and not mma_fp8 and x.dtype != torch.float16
    if a_bf16:
        a_codes = x.contiguous() if x_rounded else quant_act.fake_quant_fp8_block32(x.contiguous())
        a_scale = a_codes  # unused
        h_codes = torch.empty((num_pairs, inter), device=x.device,
                              dtype=torch.float32 if x.dtype == torch.float32 else torch.bfloat16)
        h_scale = h_codes  # unused
    else:
        a_codes, a_scale = quant_act.quant_q8_32(x.contiguous())
        h_codes = torch.empty((num_pairs, inter), dtype=torch.uint8, device=x.device)
        h_scale = torch.empty((num_pairs, inter // 32), dtype=torch.uint8, device=x.device)
    one_mul = cfg["W_ONE_MUL"] if fmt == FMT_MXFP4 and cfg["SPLIT_K"] else 0
    words = [_word_order(w) for w in (w1, w3, w2)]
    if any(words) and not (all(words) and cfg["SPLIT_K"]):
        raise ValueError("moe: word-order MXFP4 weights (mxfp4_to_word_order) need all of w1, "
                         "w3, w2 in word order and the SPLIT_K tiles (mma='bf16' or 'auto')")
    mode_up, mode_down = _one_mul_mode(one_mul, w1, w3), _one_mul_mode(one_mul, w2)
    bk_up = _block_k(dim, cfg["BK"])
    _moe_gemm_kernel[(num_blocks, cdiv(inter, cfg["BN"]))](
        a_codes, a_scale, d1, s1, d3, s3, sorted_pairs, block_expert, route_w, h_codes, h_scale,
        num_pairs, inter, dim, topk, float(limit),
        a_codes.stride(0), a_scale.stride(0), d1.stride(0), d1.stride(1),
        s1.stride(0) if fmt != FMT_PLAIN else 0, s1.stride(1) if fmt != FMT_PLAIN else 0,
        h_codes.stride(0), h_scale.stride(0),
        GATED=True, FMT=fmt, SCALE_ROWS=scale_rows, MMA_FP8=mma_fp8, DOT_BF16=dot_bf16, ACT=act,
        SPLIT_K=cfg["SPLIT_K"], A_BF16=a_bf16, BM=cfg["BM"],
        BN=cfg["BN"], BK=bk_up, W_ONE_MUL=mode_up, W_WORDS=all(words), W_W4A8=all(w4a8),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **_reg_cap(cfg, mode_up))

    y = (torch.zeros if skip_foreign_ids else torch.empty)((num_pairs, dim), dtype=x.dtype,
                                                          device=x.device)
    down = {**cfg, **cfg.get("DOWN", {})}  # the down projection's own tiling, if any
    bk_down = _block_k(inter, down["BK"])
    _moe_gemm_kernel[(num_blocks, cdiv(dim, down["BN"]))](
        h_codes, h_scale, d2, s2, d2, s2, sorted_pairs, block_expert, route_w, y, y,
        num_pairs, dim, inter, 1, float(limit),
        h_codes.stride(0), h_scale.stride(0), d2.stride(0), d2.stride(1),
        s2.stride(0) if fmt != FMT_PLAIN else 0, s2.stride(1) if fmt != FMT_PLAIN else 0,
        y.stride(0), 0,
        GATED=False, FMT=fmt, SCALE_ROWS=scale_rows2, MMA_FP8=mma_fp8, DOT_BF16=dot_bf16, ACT=act,
        SPLIT_K=cfg["SPLIT_K"], A_BF16=a_bf16, BM=cfg["BM"],
        BN=down["BN"], BK=bk_down, W_ONE_MUL=mode_down, W_WORDS=all(words), W_W4A8=all(w4a8),
        num_warps=down["num_warps"], num_stages=down["num_stages"], **_reg_cap(down, mode_down))
    if not combine:
        return y
    return combine_pairs(y, expert_ids if combine_ids is None else combine_ids)


def combine_pairs(y: torch.Tensor, order_ids: torch.Tensor,
                  residual: torch.Tensor | None = None) -> torch.Tensor:
    """(N, D) fp32: each token's sum of its top-k per-pair rows y (N * topk, D), in increasing
    ``order_ids`` (N, topk) — the reference's expert-id order; fp32 from 0, no atomics. With
    ``residual`` (N, D): that sum + residual in fp32, rounded once to residual's dtype (the
    shared expert added in the same pass)."""
    num_tokens, topk = order_ids.shape
    dim = y.shape[1]
    out = torch.empty((num_tokens, dim), device=y.device,
                      dtype=torch.float32 if residual is None else residual.dtype)
    if num_tokens == 0:
        return out
    if residual is not None:
        assert residual.shape == (num_tokens, dim) and residual.stride(1) == 1, residual.shape
    res = out if residual is None else residual
    bf16_bits = out.dtype == torch.bfloat16
    block_d = min(COMBINE_BLOCK_D, next_power_of_2(dim))
    _moe_combine_kernel[(num_tokens, cdiv(dim, block_d))](
        y, order_ids.contiguous(), res, out.view(torch.int16) if bf16_bits else out, dim,
        y.stride(0), res.stride(0), out.stride(0), TOPK=topk,
        KP=max(2, next_power_of_2(topk)), BLOCK_D=block_d, HAS_RES=residual is not None,
        OUT_BF16_BITS=bf16_bits, num_warps=COMBINE_WARPS)
    return out


def moe_routed_experts(x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor,
                       w1, w3, w2, limit: float, combine_ids: torch.Tensor | None = None,
                       residual: torch.Tensor | None = None,
                       x_rounded: bool = False) -> torch.Tensor:
    """Registered op (reference ``moe.moe_routed_experts``): (N, D) x.dtype -> (N, D) fp32, or
    with ``residual`` (N, D) (the shared expert's output) the sum + residual in residual's
    dtype, added in the combine's pass (no fp32 (N, D) round trip).

    w1, w3: ExpertWeights (E, I, D) or float (E, I, D); w2: ExpertWeights (E, D, I) or float.
    combine_ids: (N, K) ids ordering each token's sum (default expert_ids).
    x_rounded: x holds its Q8_32 values already (the paths that round x to values skip it).
    """
    if residual is None:
        return run_experts(x, expert_ids, weights, w1, w3, w2, limit, combine_ids=combine_ids,
                           x_rounded=x_rounded)
    y = run_experts(x, expert_ids, weights, w1, w3, w2, limit, combine=False,
                    x_rounded=x_rounded)
    return combine_pairs(y, expert_ids if combine_ids is None else combine_ids, residual)


def expert_ffn(x: torch.Tensor, w1, w3, w2, limit: float,
               route_weight: torch.Tensor | None = None,
               x_rounded: bool = False) -> torch.Tensor:
    """Registered op (reference ``moe.expert_ffn``, the shared expert): (N, D) -> (N, D) x.dtype.

    Weights: float (I, D)/(D, I), gemm_fp8.Fp8BlockWeight, or 1-expert ExpertWeights. FP8 block
    weights on the GPU go to the dense projection kernels (``shared_expert.shared_expert_ffn``,
    every row count); the rest is a 1-expert grouped GEMM. ``x_rounded``: as
    ``moe_routed_experts``'.
    """
    if not is_interpreting() and x.is_cuda and shared_expert.applies(x, w1, w3, w2):
        return shared_expert.shared_expert_ffn(x, w1, w3, w2, limit, route_weight, x_rounded)

    def one(w):
        if isinstance(w, Fp8BlockWeight):
            return fp8_block_experts(w.codes, w.scale)
        return w if isinstance(w, ExpertWeights | Mxfp4ExpertWeights) else w[None]

    num_tokens = x.shape[0]
    ids = torch.zeros((num_tokens, 1), dtype=torch.int32, device=x.device)
    rw = (torch.ones(num_tokens, dtype=torch.float32, device=x.device) if route_weight is None
          else route_weight.to(torch.float32))
    return run_experts(x, ids, rw, one(w1), one(w3), one(w2), limit, combine=False,
                       x_rounded=x_rounded)


def supports_moe(spec: dict) -> bool:
    """CUDA SM90+; ``hidden_size``/``moe_intermediate_size`` (optional) multiples of 32;
    ``expert_format`` (optional) one of "mxfp4", "fp8", "dequantized"."""
    return (quant_act.is_cuda_sm90_plus(spec)
            and spec.get("hidden_size", 32) % 32 == 0
            and spec.get("moe_intermediate_size", 32) % 32 == 0
            and spec.get("expert_format", "mxfp4") in ("mxfp4", "fp8", "dequantized"))
