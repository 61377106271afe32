"""MXFP4 expert weights in word order: each 32-bit word's bits rearranged at load for a cheaper
unpack (an option of ``moe_experts``; lossless, the same 4 bits per weight and the same scales).

A stored word (bytes j..j+3 of a weight row, little-endian) holds 8 e2m1 nibbles, K elements
2j..2j+7: byte a's low nibble is K = 2j + 2a, its high nibble 2j + 2a + 1 (checkpoint order).
The SPLIT_K tiles want them as four bf16x2 registers (the even K elements in $0/$1, the odd in
$2/$3, as ``mxfp4_unpack.E2M1X4_TO_BF16*``):

    register   $0 (even j, j+1)   $1 (even j+2, j+3)   $2 (odd j, j+1)   $3 (odd j+2, j+3)
    K offsets      0, 2               4, 6                 1, 3              5, 7

each half holding its nibble as bf16 bits s|0000000|e1 e0|m|000000 (value * 2^-126: sign at bit
15, e1 e0 m at bits 8..6). Word order puts the nibble bits where ONE rotation and a mask (or
two, and an OR) lift them into place: register i takes its sign bits from the word rotated right
by SIGN_SHIFTS[i] and its e1 e0 m bits from the word rotated right by MAG_SHIFTS[i]:

    $0 = w & 0x81C081C0                                     1 instruction
    $3 = rotr(w, 3) & 0x81C081C0                            2
    $1 = (rotr(w, 1) & 0x80008000) | (rotr(w, 6) & 0x01C001C0)     4 (2 rotations, 2 LOP3)
    $2 = (rotr(w, 2) & 0x80008000) | (rotr(w, 13) & 0x01C001C0)    4

— 11 instructions for 8 weights before the scale multiplies, against ~16 for the checkpoint
order (PRMT, shifts and masks per byte pair; SASS of the decode K step, ``bench/moe_sass.py``).
One shift for all four registers is impossible (no 4 rotations of the pattern {6, 7, 8, 15,
22, 23, 24, 31} tile 32 bits); these shifts were found by exhaustive search and use every bit
once. ``to_word_order`` / ``from_word_order`` (pure torch, ``kernels/mxfp4_word_order.py``,
re-exported here) convert at load; ``words_asm`` is the kernel side, ``words_twin`` its tl twin
under the interpreter.
"""

from __future__ import annotations

import triton
import triton.language as tl

from deepinfer.kernels.mxfp4_word_order import (  # noqa: F401  (re-exported: the host side)
    MAG_SHIFTS,
    SIGN_SHIFTS,
    from_word_order,
    to_word_order,
    word_bit_permutation,
)
from deepinfer.kernels.triton.launch_math import cdiv

# $4 = one word-order word, $5/$6 = the bf16x2 scales (as for mxfp4_unpack.E2M1X4_TO_BF16*);
# shf.r.wrap with both sources the word is a rotation. The tails multiply like the
# checkpoint-order asm: one bf16x2 multiply by 2^(e - 1), or two (2^126, then 2^(e - 127)).
_EXTRACT = """
.reg .b32 t0, t1, t2, t3, r, m, nz;
mov.b32 nz, 0x80008000;
and.b32 t0, $4, 0x81C081C0;
shf.r.wrap.b32 r, $4, $4, 3; and.b32 t3, r, 0x81C081C0;
shf.r.wrap.b32 r, $4, $4, 6; and.b32 m, r, 0x01C001C0;
shf.r.wrap.b32 r, $4, $4, 1; and.b32 t1, r, 0x80008000; or.b32 t1, t1, m;
shf.r.wrap.b32 r, $4, $4, 13; and.b32 m, r, 0x01C001C0;
shf.r.wrap.b32 r, $4, $4, 2; and.b32 t2, r, 0x80008000; or.b32 t2, t2, m;
"""
WORDS_TO_BF16_ONE_MUL = tl.constexpr("{" + _EXTRACT + """
fma.rn.bf16x2 $0, t0, $5, nz; fma.rn.bf16x2 $1, t1, $6, nz;
fma.rn.bf16x2 $2, t2, $5, nz; fma.rn.bf16x2 $3, t3, $6, nz;
}""")
WORDS_TO_BF16 = tl.constexpr("{" + _EXTRACT + """
.reg .b32 k;
mov.b32 k, 0x7E807E80;
fma.rn.bf16x2 t0, t0, k, nz; fma.rn.bf16x2 $0, t0, $5, nz;
fma.rn.bf16x2 t1, t1, k, nz; fma.rn.bf16x2 $1, t1, $6, nz;
fma.rn.bf16x2 t2, t2, k, nz; fma.rn.bf16x2 $2, t2, $5, nz;
fma.rn.bf16x2 t3, t3, k, nz; fma.rn.bf16x2 $3, t3, $6, nz;
}""")


@triton.jit
def _rotr(w, s: tl.constexpr):
    """Rotate uint32 ``w`` right by s bits."""
    if s == 0:
        return w
    return (w >> s) | (w << (32 - s))


@triton.jit
def _register_values(w, SIGN: tl.constexpr, MAG: tl.constexpr):
    """The two halves of one output register as fp32 values * 2^-126 ([BN, BK // 8] each)."""
    sign_src = _rotr(w, SIGN)
    mag_src = _rotr(w, MAG)
    # fp32 bits: sign at 31, e1 e0 m at 24..22 (a bf16 bit b of the register half is b + 16)
    lo = ((sign_src & 0x8000) << 16) | ((mag_src & 0x1C0) << 16)
    hi = (sign_src & 0x80000000) | (mag_src & 0x1C00000)
    lo = lo.to(tl.float32, bitcast=True)
    hi = hi.to(tl.float32, bitcast=True)
    return lo, hi


@triton.jit
def _join4(x0, x1, x2, x3, BN: tl.constexpr, BK: tl.constexpr):
    """[BN, BK // 8] x 4 -> [BN, BK // 2]: element 4 w + a = x_a[w]."""
    inner0 = tl.join(x0, x2)  # index c: x0 | x2 (a = 2 c + d with d = 0)
    inner1 = tl.join(x1, x3)
    return tl.reshape(tl.join(inner0, inner1), (BN, BK // 2))


@triton.jit
def words_asm(p, s16, ONE_MUL: tl.constexpr):
    """Word-order bytes p [BN, BK // 2] -> (even, odd) [BN, BK // 2] scaled bf16, as
    ``mxfp4_unpack.unpack_mxfp4_halves``' PTX path: s16 the scales as its asm takes them."""
    asm: tl.constexpr = WORDS_TO_BF16_ONE_MUL if ONE_MUL else WORDS_TO_BF16
    return tl.inline_asm_elementwise(asm, "=r,=r,=r,=r,r,r,r", [p, s16],
                                     dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)


@triton.jit
def words_twin(p, BN: tl.constexpr, BK: tl.constexpr):
    """The interpreter's twin of ``words_asm`` before the scales: (even, odd) [BN, BK // 2] as
    fp32 values * 2^-126 (the bits the asm builds, in fp32 form)."""
    q = tl.reshape(p.to(tl.uint8).to(tl.uint32), (BN, BK // 8, 2, 2))
    b02, b13 = tl.split(q)  # [BN, BK // 8, 2]: bytes (0, 2) and (1, 3) of each word
    b0, b2 = tl.split(b02)
    b1, b3 = tl.split(b13)
    w = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24)
    r0_lo, r0_hi = _register_values(w, 0, 0)  # (SIGN_SHIFTS[i], MAG_SHIFTS[i]), as the asm
    r1_lo, r1_hi = _register_values(w, 1, 6)
    r2_lo, r2_hi = _register_values(w, 2, 13)
    r3_lo, r3_hi = _register_values(w, 3, 3)
    return _join4(r0_lo, r0_hi, r1_lo, r1_hi, BN, BK), _join4(r2_lo, r2_hi, r3_lo, r3_hi, BN, BK)


# ---------------------------------------------------------------------------------------------
# Load-time conversion on the GPU (the torch loop of mxfp4_word_order is ~60 launches per call;
# one launch per expert slot here: ~5 s less of the slice plan's weight load)
# ---------------------------------------------------------------------------------------------

PERMUTE_BLOCK = 1024  # words per program


@triton.jit
def _permute_words_kernel(src_ptr, dst_ptr, num_words, rot_ptr, mask_ptr,
                          NUM_ROTS: tl.constexpr, BLOCK: tl.constexpr):
    """dst[i] = OR over j of rotr(src[i], rot[j]) & mask[j] (int32 words; dst may be src)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < num_words
    w = tl.load(src_ptr + offs, mask=ok, other=0).to(tl.uint32, bitcast=True)
    out = tl.zeros((BLOCK,), tl.uint32)
    for j in tl.static_range(NUM_ROTS):
        r = tl.load(rot_ptr + j).to(tl.uint32)
        m = tl.load(mask_ptr + j).to(tl.uint32, bitcast=True)
        out |= ((w >> r) | (w << ((32 - r) & 31))) & m  # r = 0: w | w
    tl.store(dst_ptr + offs, out.to(tl.int32, bitcast=True), mask=ok)


_ROTATION_TABLES: dict[tuple, tuple] = {}


def permute_words(packed, rotations: list[tuple[int, int]], out):
    """``mxfp4_word_order._permute_words`` in one launch: packed uint8/int8 [..., n] (n % 4 ==
    0) -> out (contiguous, same shape and dtype; may be packed itself), each 32-bit word's bits
    moved by ``rotations`` ((right rotation, destination mask) pairs)."""
    import torch

    key = (tuple(rotations), str(packed.device))
    if key not in _ROTATION_TABLES:
        rots = torch.tensor([r for r, _ in rotations], dtype=torch.int32, device=packed.device)
        masks = torch.tensor([m - (1 << 32) if m >= 1 << 31 else m for _, m in rotations],
                             dtype=torch.int32, device=packed.device)
        _ROTATION_TABLES[key] = (rots, masks)
    rots, masks = _ROTATION_TABLES[key]
    src = packed.contiguous().view(torch.uint8).view(torch.int32).reshape(-1)
    dst = out.view(torch.uint8).view(torch.int32).reshape(-1)
    num_words = src.numel()
    if num_words:
        _permute_words_kernel[(cdiv(num_words, PERMUTE_BLOCK),)](
            src, dst, num_words, rots, masks, NUM_ROTS=len(rotations), BLOCK=PERMUTE_BLOCK,
            num_warps=4)
    return out
