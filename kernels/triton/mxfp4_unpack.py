"""MXFP4 (e2m1 + ue8m0 per 32) weight tiles unpacked to exactly scaled bf16 in the expert
kernels' K loop (``moe_experts``' SPLIT_K tiles), and the one-multiply scale check.

The unpack is inline PTX on the GPU (four packed bytes per call, ~16 instructions per 8 weights
before the scale multiplies; ``mxfp4_words`` holds a cheaper variant for weights re-arranged
at load) and a tl twin of the same bits under the interpreter; tests/kernels/triton/
test_moe_unpack_ptx.py emulates the PTX on CPU. Scales: one bf16x2 multiply by 2^(e - 1) where
every scale byte is <= 128 (vouched by the weights' owner, or checked per program by
``scales_fit_one_mul``), else two (2^126, then 2^(e - 127)).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import mxfp4_words
from deepinfer.kernels.triton.quant_act import ue8m0_to_f32

# e2m1 nibbles -> scaled bf16, four packed bytes per call (tl.inline_asm_elementwise, pack=4):
# $4 = bytes b0..b3; $5, $6 = the bf16 scales of bytes (0, 1) and (2, 3); outputs $0, $1 = the low
# nibbles (elements 2j) of bytes (0, 1), (2, 3) as bf16x2, $2, $3 = the high nibbles (2j + 1).
# Each byte goes to its own 16-bit half (prmt), its nibble's bits s e1 e0 m to bf16 bits
# s|0000000|e1 e0|m|000000 (= value * 2^-126, subnormal for e = 0: exact, no lookup), then
# two bf16x2 multiplies (fma with -0): * 2^126 and * the ue8m0 scale, both exact.
E2M1X4_TO_BF16 = tl.constexpr("""
{
.reg .b32 z, t0, t1, a, b, k, nz;
mov.b32 z, 0;
mov.b32 k, 0x7E807E80;
mov.b32 nz, 0x80008000;
prmt.b32 t0, $4, z, 0x4140;
prmt.b32 t1, $4, z, 0x4342;
shl.b32 a, t0, 6; and.b32 a, a, 0x01C001C0; shl.b32 b, t0, 12; and.b32 b, b, 0x80008000;
or.b32 a, a, b; fma.rn.bf16x2 a, a, k, nz; fma.rn.bf16x2 $0, a, $5, nz;
shl.b32 a, t1, 6; and.b32 a, a, 0x01C001C0; shl.b32 b, t1, 12; and.b32 b, b, 0x80008000;
or.b32 a, a, b; fma.rn.bf16x2 a, a, k, nz; fma.rn.bf16x2 $1, a, $6, nz;
shl.b32 a, t0, 2; and.b32 a, a, 0x01C001C0; shl.b32 b, t0, 8; and.b32 b, b, 0x80008000;
or.b32 a, a, b; fma.rn.bf16x2 a, a, k, nz; fma.rn.bf16x2 $2, a, $5, nz;
shl.b32 a, t1, 2; and.b32 a, a, 0x01C001C0; shl.b32 b, t1, 8; and.b32 b, b, 0x80008000;
or.b32 a, a, b; fma.rn.bf16x2 a, a, k, nz; fma.rn.bf16x2 $3, a, $6, nz;
}
""")


# The same with ONE multiply per bf16x2: $5, $6 = 2^(e - 1) (bits (e + 126) << 7, a normal bf16
# for every e <= 128), which takes value * 2^-126 straight to value * 2^(e - 127); exact like the
# two-multiply form. Low nibbles: t << 6 has no bit at 15/31 and t << 12 none at 6-8/22-24, so
# one mask of their OR keeps both fields (one LOP3 instead of two); the high nibbles' t << 8
# would bring bit 0/16 to 8/24, so they keep two masks. tests/kernels/triton/
# test_moe_unpack_ptx.py emulates both asm strings on every byte. A scale byte > 128 (a weight
# scale >= 2) would overflow 2^(e - 1): ``scales_fit_one_mul`` checks a program's scale bytes
# first and the kernel takes the two-multiply loop for it then.
E2M1X4_TO_BF16_ONE_MUL = tl.constexpr("""
{
.reg .b32 z, t0, t1, a, b, nz;
mov.b32 z, 0;
mov.b32 nz, 0x80008000;
prmt.b32 t0, $4, z, 0x4140;
prmt.b32 t1, $4, z, 0x4342;
shl.b32 a, t0, 6; shl.b32 b, t0, 12; or.b32 a, a, b; and.b32 a, a, 0x81C081C0;
fma.rn.bf16x2 $0, a, $5, nz;
shl.b32 a, t1, 6; shl.b32 b, t1, 12; or.b32 a, a, b; and.b32 a, a, 0x81C081C0;
fma.rn.bf16x2 $1, a, $6, nz;
shl.b32 a, t0, 2; and.b32 a, a, 0x01C001C0; shl.b32 b, t0, 8; and.b32 b, b, 0x80008000;
or.b32 a, a, b; fma.rn.bf16x2 $2, a, $5, nz;
shl.b32 a, t1, 2; and.b32 a, a, 0x01C001C0; shl.b32 b, t1, 8; and.b32 b, b, 0x80008000;
or.b32 a, a, b; fma.rn.bf16x2 $3, a, $6, nz;
}
""")


@triton.jit
def load_mxfp4_raw(w_ptr, s_ptr, rows_w, stride_wn, stride_sn, k0, BN: tl.constexpr,
                    BK: tl.constexpr):
    """K elements [k0, k0 + BK) of BN MXFP4 rows as stored: packed bytes [BN, BK // 2] and
    ue8m0 scale bytes [BN, BK // 32] (int32)."""
    p = tl.load(w_ptr + rows_w[:, None] * stride_wn + k0 // 2 + tl.arange(0, BK // 2)[None, :])
    e_blocks = tl.load(s_ptr + rows_w[:, None] * stride_sn + k0 // 32
                       + tl.arange(0, BK // 32)[None, :]).to(tl.int32)
    return p, e_blocks


@triton.jit
def unpack_mxfp4_halves(p, e_blocks, ASM: tl.constexpr, ONE_MUL: tl.constexpr,
                         BN: tl.constexpr, BK: tl.constexpr, WORDS: tl.constexpr = False):
    """``load_mxfp4_raw``'s tile dequantized exactly, split by parity.

    Returns (even, odd), each [BN, BK // 2]: the low nibbles (K elements k0 + 2j) and the high
    nibbles (k0 + 2j + 1) times their ue8m0 scales, with no interleave (the caller dots them
    with A's even and odd columns). ASM: bf16 from the packed bytes by ``E2M1X4_TO_BF16``
    (about 3 instructions per element, the GPU path), or ``E2M1X4_TO_BF16_ONE_MUL`` with
    ONE_MUL (the caller has checked that every scale byte of the tile is <= 128); else the same
    bits built with tl integer ops in fp32 (the interpreter's twin of it). WORDS: p holds
    word-order bytes (``mxfp4_words``: fewer instructions per weight), same results.
    """
    NB: tl.constexpr = BK // 32
    e = tl.reshape(tl.broadcast_to(e_blocks[:, :, None], (BN, NB, 16)), (BN, BK // 2))
    if ASM:
        if ONE_MUL:
            s16 = ((e + 126) << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)  # 2^(e - 1)
        else:  # 2^(e - 127) in bf16 bits: e << 7, or the subnormal 0x0040 for e = 0
            s16 = tl.where(e == 0, 0x40, e << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)
        if WORDS:
            even, odd = mxfp4_words.words_asm(p, s16, ONE_MUL)
        else:
            asm: tl.constexpr = E2M1X4_TO_BF16_ONE_MUL if ONE_MUL else E2M1X4_TO_BF16
            even, odd = tl.inline_asm_elementwise(
                asm, "=r,=r,=r,=r,r,r,r", [p, s16], dtype=(tl.bfloat16, tl.bfloat16),
                is_pure=True, pack=4)
    else:
        scale = ue8m0_to_f32(e.to(tl.uint8))
        if WORDS:
            even, odd = mxfp4_words.words_twin(p, BN, BK)
        else:
            q = p.to(tl.int32)
            even = (((q & 0x7) << 22) | ((q & 0x8) << 28)).to(tl.float32, bitcast=True)
            odd = (((q & 0x70) << 18) | ((q & 0x80) << 24)).to(tl.float32, bitcast=True)
        even = even * 2.0**126 * scale
        odd = odd * 2.0**126 * scale
    return even, odd


@triton.jit
def scales_fit_one_mul(s1_base, s3_base, rows_w, stride_sn, K, GATED: tl.constexpr,
                        BN: tl.constexpr):
    """Whether every ue8m0 byte of this program's rows of w1 (and w3) is <= 128, i.e. 2^(e - 1)
    is a normal bf16 for all of them (``E2M1X4_TO_BF16_ONE_MUL``). Once per program, 4 bytes
    per load (the caller guarantees (K / 32) % 4 == 0): 1/16 of the bytes the K loop streams
    (mostly L2 hits for it afterwards). A byte b > 128 has bit 7 set and a nonzero low 7 bits;
    adding 0x7F to the low 7 bits carries into bit 7 exactly when they are nonzero."""
    CW: tl.constexpr = 64  # words per row per chunk
    words_per_row = K // 128
    row_words = rows_w[:, None] * (stride_sn // 4)
    w1_words = s1_base.to(tl.pointer_type(tl.int32))
    w3_words = s3_base.to(tl.pointer_type(tl.int32))
    bad = tl.zeros((BN, CW), dtype=tl.int32)
    for kw in range(0, words_per_row, CW):
        cols = kw + tl.arange(0, CW)[None, :]
        mask = cols < words_per_row
        w = tl.load(w1_words + row_words + cols, mask=mask, other=0)
        bad |= w & ((w & 0x7F7F7F7F) + 0x7F7F7F7F)
        if GATED:
            w = tl.load(w3_words + row_words + cols, mask=mask, other=0)
            bad |= w & ((w & 0x7F7F7F7F) + 0x7F7F7F7F)
    bad = bad & -2139062144  # 0x80808080 as int32: the bytes' bit 7
    return tl.max(tl.max(bad != 0, axis=1), axis=0) == 0


def word_scales(*scales: torch.Tensor) -> bool:
    """Whether ``scales_fit_one_mul`` may read these (E, O, K/32) ue8m0 tensors 4 bytes at a
    time: 4-byte aligned, row and expert strides multiples of 4, K/32 a multiple of 4."""
    return all(s.data_ptr() % 4 == 0 and s.stride(0) % 4 == 0 and s.stride(1) % 4 == 0
               and s.shape[2] % 4 == 0 and s.stride(2) == 1 for s in scales)
