"""A tiny emulator of the PTX our inline asm uses (``mxfp4_unpack.E2M1X4_TO_BF16*``), so that CI
checks the asm's bits on CPU — the interpreter runs the tl twin instead of the asm.

Supported: ``.reg`` declarations, ``mov.b32`` (also ``mov.b32 {lo, hi}, r``: a 32-bit
register split into two 16-bit ones), ``prmt.b32`` (default mode), ``shl.b32``,
``shr.b32`` / ``shr.u32``, ``shf.r.wrap.b32`` / ``shf.l.wrap.b32`` (funnel shifts of b:a, mod
32), ``and.b32``, ``or.b32``, ``add.u32`` and ``mul.lo.u32`` (mod 2^32), ``fma.rn.bf16x2``
(exact product and sum, one round-to-nearest-even to bf16, subnormals kept). Registers are
Python ints (32-bit).
"""

from __future__ import annotations

import math
import re


def bf16_to_float(bits: int) -> float:
    """bf16 bits -> the exact value (fp32's exponent range, subnormals included)."""
    sign = -1.0 if bits & 0x8000 else 1.0
    exp, mant = (bits >> 7) & 0xFF, bits & 0x7F
    if exp == 0xFF:
        return sign * math.inf if mant == 0 else math.nan
    if exp == 0:
        return sign * mant * 2.0**-133
    return sign * (1 + mant / 128) * 2.0 ** (exp - 127)


def float_to_bf16(x: float) -> int:
    """An exact value -> bf16 bits, rounded to nearest even (overflow -> inf)."""
    if math.isnan(x):
        return 0x7FC0
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a == 0:
        return sign
    if a == math.inf:
        return sign | 0x7F80
    e = math.floor(math.log2(a))
    e = max(e, -126)  # subnormal range: fixed quantum 2^-133
    quantum = 2.0 ** (e - 7)
    q = a / quantum
    n = math.floor(q)
    rest = q - n
    if rest > 0.5 or (rest == 0.5 and n % 2 == 1):
        n += 1
    value = n * quantum
    if value >= 2.0**128:
        return sign | 0x7F80
    if value < 2.0**-126:  # subnormal
        return sign | int(round(value / 2.0**-133))
    e = math.floor(math.log2(value))
    mant = int(round((value / 2.0**e - 1) * 128))
    return sign | ((e + 127) << 7) | mant


def _prmt(a: int, b: int, sel: int) -> int:
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    out = 0
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        byte = src[nib & 7]
        if nib & 8:  # sign-replicate mode
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def _fma_bf16x2(a: int, b: int, c: int) -> int:
    out = 0
    for half in (0, 16):
        x, y, z = ((v >> half) & 0xFFFF for v in (a, b, c))
        value = bf16_to_float(x) * bf16_to_float(y) + bf16_to_float(z)  # exact: 8-bit mantissas
        out |= float_to_bf16(value) << half
    return out


def run(asm: str, inputs: dict[int, int], num_outputs: int) -> list[int]:
    """Execute ``asm`` with ``$k`` (k >= num_outputs) bound to ``inputs[k]``; returns $0.. ."""
    regs: dict[str, int] = {f"${k}": v & 0xFFFFFFFF for k, v in inputs.items()}
    body = asm.strip().strip("{}")

    def val(tok: str) -> int:
        tok = tok.strip()
        return int(tok, 0) & 0xFFFFFFFF if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", tok) \
            else regs[tok]

    for stmt in (s.strip() for s in body.split(";")):
        if not stmt or stmt.startswith(".reg"):
            continue
        op, rest = stmt.split(None, 1)
        split = re.fullmatch(r"\{\s*(\S+)\s*,\s*(\S+)\s*\}\s*,\s*(\S+)", rest)
        if op == "mov.b32" and split:
            v = val(split.group(3))
            regs[split.group(1)], regs[split.group(2)] = v & 0xFFFF, v >> 16
            continue
        args = [t.strip() for t in rest.split(",")]
        d, srcs = args[0], [val(t) for t in args[1:]]
        if op == "mov.b32":
            regs[d] = srcs[0]
        elif op == "prmt.b32":
            regs[d] = _prmt(*srcs)
        elif op == "shl.b32":
            regs[d] = (srcs[0] << srcs[1]) & 0xFFFFFFFF
        elif op in ("shr.b32", "shr.u32"):
            regs[d] = srcs[0] >> srcs[1]
        elif op == "shf.l.wrap.b32":
            lo, hi, n = srcs[0], srcs[1], srcs[2] % 32
            regs[d] = ((((hi << 32) | lo) << n) >> 32) & 0xFFFFFFFF
        elif op == "add.u32":
            regs[d] = (srcs[0] + srcs[1]) & 0xFFFFFFFF
        elif op == "mul.lo.u32":
            regs[d] = (srcs[0] * srcs[1]) & 0xFFFFFFFF
        elif op == "shf.r.wrap.b32":
            lo, hi, n = srcs[0], srcs[1], srcs[2] % 32
            regs[d] = (((hi << 32) | lo) >> n) & 0xFFFFFFFF
        elif op == "and.b32":
            regs[d] = srcs[0] & srcs[1]
        elif op == "or.b32":
            regs[d] = srcs[0] | srcs[1]
        elif op == "fma.rn.bf16x2":
            regs[d] = _fma_bf16x2(*srcs)
        else:
            raise NotImplementedError(f"ptx_subset: {op}")
    return [regs[f"${k}"] for k in range(num_outputs)]
