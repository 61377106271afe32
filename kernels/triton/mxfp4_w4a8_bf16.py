"""The W4A8 kernel order's MXFP4 words decoded to exactly scaled bf16 (the bit logic of
``moe_gluon_w4a16_prefill``): the PTX, its torch twin, and the K permutation that makes the
decoded registers a bf16 wgmma A fragment.

A W4A8-order word (``kernels/mxfp4_w4a8_order.py``; row r, 32-K group G, quad lane q) holds 8
e2m1 nibbles: the "lo" values K = 32 G + 4 q + b (byte b: s e1 e0 m at bits 7, 4, 3, 2) and the
"hi" values K = 32 G + 16 + 4 q + b (placed for the FP8 kernel's rotations). The PTX turns one
word into four bf16x2 registers — the lo values of bytes (0, 2), (1, 3), the hi values of bytes
(0, 2), (1, 3) — as bf16 bits s | e1 e0 m << 6 (value * 2^-126; e2m1's subnormal 0.5 lands on
bf16's) — ``EXTRACT``, integer instructions only —, then multiplies by the scale: one bf16x2
FMA by 2^(S - 1) (``SCALE_ONE_MUL``, every scale byte S <= 128) or two (2^126, then 2^(S -
127): ``SCALE_TWO_MUL``); the multiplier comes in as an operand (``scale_multiplier``: the
kernel builds it once per row and 32-K group, not per word). The kernel extracts a group's
words while the previous group's wgmmas run and scales them after the wait. 20 (24)
instructions per 8 weights in the sm_90 SASS: 16 integer (10 LOP3, 4 shifts, 2 IMAD), 4 (8)
HMUL2. tests/kernels/triton/test_moe_w4a16_prefill.py
emulates both PTX strings (``ptx_subset``) against ``decode_twin`` and the twin against the
checkpoint's values.
"""

from __future__ import annotations

import torch

# one W4A8-order word -> e, o = the lo values of bytes (0, 2), (1, 3); x, y the hi values of
# bytes (0, 2), (1, 3), as unscaled bf16x2 bits.
# lo byte b: s e1 e0 m at bits 7, 4, 3, 2 (e = bytes 0 / 2: x (<< 8 | << 4) — the sum's
# carries stay below the kept bits —; o = bytes 1 / 3: the sign where it is, e1 e0 m >> 4),
# masked to s | e1 e0 m << 6. o and y are written as (v & sign) | ((v >> 4) & e1e0m), which
# ptxas turns into a shift and two LOP3s (session 31; the earlier (v & m) | (v & m) >> 4 form
# kept a third: 197 -> 165 LOP3 per 128-K step and thread in the REP 2 loops' sm_90 SASS)
_EXTRACT = """
.reg .b32 e, o, h, x, y, t;
and.b32 e, $4, 0x009C009C; mul.lo.u32 e, e, 272; and.b32 e, e, 0x81C081C0;
shr.u32 t, $4, 4; and.b32 t, t, 0x01C001C0; and.b32 o, $4, 0x80008000; or.b32 o, o, t;
shf.l.wrap.b32 x, $4, $4, 2; shf.l.wrap.b32 y, $4, $4, 4;
and.b32 x, x, 0x88888888; and.b32 y, y, 0x14141414; or.b32 h, x, y;
and.b32 x, h, 0x009C009C; mul.lo.u32 x, x, 272; and.b32 x, x, 0x81C081C0;
shr.u32 t, h, 4; and.b32 t, t, 0x01C001C0; and.b32 y, h, 0x80008000; or.b32 y, y, t;
"""
# the decode in two parts (the kernel runs the first while wgmmas are in flight): EXTRACT, one
# word ($4) -> the unscaled bits ($0..$3: e, o, x, y); SCALE_*, those bits ($8..$11) times the
# scale's bf16x2 multiplier ($12, ``scale_multiplier``) -> eight bf16 ($0..$7: e.lo, e.hi,
# o.lo, o.hi, x.lo, x.hi, y.lo, y.hi; e.lo = the lo value of byte 0, e.hi of byte 2, o: bytes
# 1 / 3, x and y the hi values alike)
EXTRACT = "{" + _EXTRACT + """
mov.b32 $0, e; mov.b32 $1, o; mov.b32 $2, x; mov.b32 $3, y;
}"""
_NZ = ".reg .b32 nz, r0, r1, r2, r3;\nmov.b32 nz, 0x80008000;\n"
_SPLIT = """
mov.b32 {$0, $1}, r0; mov.b32 {$2, $3}, r1; mov.b32 {$4, $5}, r2; mov.b32 {$6, $7}, r3;
}"""
SCALE_ONE_MUL = "{" + _NZ + """
fma.rn.bf16x2 r0, $8, $12, nz; fma.rn.bf16x2 r1, $9, $12, nz;
fma.rn.bf16x2 r2, $10, $12, nz; fma.rn.bf16x2 r3, $11, $12, nz;""" + _SPLIT
# any S: x 2^126 (0x7E80), then x 2^(S - 127) ($12 = S << 7; S = 0 reads as 0, not 2^-127)
SCALE_TWO_MUL = "{" + _NZ + """.reg .b32 k;
mov.b32 k, 0x7E807E80;
fma.rn.bf16x2 r0, $8, k, nz; fma.rn.bf16x2 r0, r0, $12, nz;
fma.rn.bf16x2 r1, $9, k, nz; fma.rn.bf16x2 r1, r1, $12, nz;
fma.rn.bf16x2 r2, $10, k, nz; fma.rn.bf16x2 r2, r2, $12, nz;
fma.rn.bf16x2 r3, $11, k, nz; fma.rn.bf16x2 r3, r3, $12, nz;""" + _SPLIT
# the multiplier's bits per half: 2^(S - 1) = (S + 126) << 7 (``SCALE_ONE_MUL``: S <= 128) or
# 2^(S - 127) = S << 7 (``SCALE_TWO_MUL``); times 0x00010001: both halves
ONE_MUL_BIAS = 126


def scale_multiplier(scale: int, one_mul: bool) -> int:
    """The scale PTX's $12 for scale byte ``scale``: the bf16x2 multiplier (both halves), as
    the kernel computes it: (S + 126) * 0x00800080 (one multiply) or S * 0x00800080 (two)."""
    return ((scale + (ONE_MUL_BIAS if one_mul else 0)) * 0x00800080) & 0xFFFFFFFF


def k_permutation() -> torch.Tensor:
    """(32,) int64: the K offset inside a 32-K group held by the wgmma A operand's column v,
    K_off(v) = v3 + 2 v0 + 4 v1 + 8 v2 + 16 v4 (v0: the fragment's register pair element, v1 v2:
    the quad lane, v3: its second k8 half, v4: the second k16). The token gather puts
    x[32 G + K_off(v)] at column 32 G + v."""
    v = torch.arange(32)
    return ((v >> 3) & 1) + ((v & 1) << 1) + (((v >> 1) & 3) << 2) + (v & 16)


def decode_twin(words: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Torch twin of ``_DECODE_*``: W4A8-order words (..., ) int64 (one per row / group / quad
    lane) and their scale bytes (same shape) -> (..., 8) float32 in the asm's output order
    (lo of bytes 0, 2, 1, 3; then hi of bytes 0, 2, 1, 3), the bit operations exactly as in
    the PTX (bf16 bits -> value; the products are exact)."""
    w = words & 0xFFFFFFFF
    m32 = 0xFFFFFFFF

    def rotl(x, s):
        return ((x << s) | (x >> (32 - s))) & m32

    e = ((w & 0x009C009C) * 272) & 0x81C081C0
    o = (w & 0x80008000) | ((w >> 4) & 0x01C001C0)
    h = (rotl(w, 2) & 0x88888888) | (rotl(w, 4) & 0x14141414)
    x = ((h & 0x009C009C) * 272) & 0x81C081C0
    y = (h & 0x80008000) | ((h >> 4) & 0x01C001C0)
    halves = []
    for reg in (e, o, x, y):
        halves += [reg & 0xFFFF, reg >> 16]
    bits = torch.stack(halves, -1)  # (..., 8): e.lo, e.hi, o.lo, o.hi, ... (bf16 bits)
    vals = (bits << 16).to(torch.int32).view(torch.float32) * 2.0**126  # the e2m1 values
    return vals * torch.exp2(scale.to(torch.float32)[..., None] - 127.0)
