"""Which bit layout of the W4A8 kernel order's 32-bit MXFP4 words decodes cheapest, on the CPU:
the bf16 decode of the prefill expert GEMM against the FP8 decode of the W4A8 decode GEMM, in
a rotation-terms cost model.

    python bench/mxfp4_layout_search.py

A word holds 8 e2m1 values (bits s e1 e0 m). The bf16 decode makes 4 registers of 2 values,
each at s 15, e1 8, e0 7, m 6 of its 16-bit half (value * 2^-126); the FP8 decode 2 registers
of 4 values at s 7, e1 4, e0 3, m 2 of each byte. Which value lands in which slot is free
(the token gather permutes K to match), so a layout is the words' bit positions of each value.
Model: a register is an OR of masked rotations of the word — one LOP3 per term, one SHF per
distinct nonzero rotation over the word's registers (shared): an upper bound on the integer
instructions (the shipped PTX reaches 16 for the bf16 decode, with two IMADs doing two shifts
each; this model counts it 17).

Found (session 34): the four bf16 registers cannot each be one rotation of the word (the
target set {6, 7, 8, 15} + {0, 16} does not tile Z_32 by four translates), so the bf16 decode
needs at least 9 (three one-term registers and one of two terms); every layout reaching 9
costs the FP8 decode 11 (today 5: one mask for the lo values, two rotations for the hi ones);
keeping the FP8 decode at 5 (its lo values at e4m3 positions), the best byte-periodic
arrangement of the hi values costs the bf16 decode 15 against the shipped layout's 17 in this
model — at most ~2 instructions a word (8 weights) for a new load-time order and two
rewritten decodes, with the decode GEMMs at stake. Not pursued.
"""

from __future__ import annotations

import itertools

import numpy as np

BF16 = {"s": 15, "e1": 8, "e0": 7, "m": 6}  # a value's bits in a bf16 half
FP8 = {"s": 7, "e1": 4, "e0": 3, "m": 2}  # ... in an e4m3 byte
TYPES = tuple(BF16)
_PERMS = np.array(list(itertools.permutations(range(8))), dtype=np.int64)


def _popcount(x: np.ndarray) -> np.ndarray:
    return sum((x >> i) & 1 for i in range(32))


def bf16_target() -> list[int]:
    """The 8 bit positions a bf16 register of two values fills."""
    return sorted(t + 16 * h for t in BF16.values() for h in (0, 1))


def rotation_tilings(target: list[int]) -> list[tuple[int, ...]]:
    """Rotation sets r_1 < .. < r_k (k = 32 / len(target)) whose rotated targets partition the
    word's 32 bits: the layouts where every register is one masked rotation."""
    k = 32 // len(target)
    return [rs for rs in itertools.combinations(range(32), k)
            if len({(t - r) % 32 for r in rs for t in target}) == 32]


def cost(layout: list[dict[str, int]], fmt: str) -> tuple[int, list[int]]:
    """(instructions, value order) of the cheapest slot assignment of ``layout`` (8 values:
    bit type -> word position) for the ``fmt`` decode ("bf16": 4 registers x 2 halves, "fp8":
    2 registers x 4 bytes): per register one LOP3 per distinct rotation, plus one SHF per
    distinct nonzero rotation of the word."""
    width, target = (16, BF16) if fmt == "bf16" else (8, FP8)
    per_reg = 32 // width
    masks = np.zeros((8, 8), dtype=np.int64)  # value, slot -> the rotations it needs
    for v, bits in enumerate(layout):
        for slot in range(8):
            off = width * (slot % per_reg)
            for t in TYPES:
                masks[v, slot] |= 1 << ((target[t] + off - bits[t]) % 32)
    regs = [np.zeros(len(_PERMS), dtype=np.int64) for _ in range(8 // per_reg)]
    for slot in range(8):
        regs[slot // per_reg] |= masks[_PERMS[:, slot], slot]
    union = np.zeros_like(regs[0])
    for r in regs:
        union |= r
    total = sum(_popcount(r) for r in regs) + _popcount(union & ~1)
    best = int(total.argmin())
    return int(total[best]), _PERMS[best].tolist()


def shipped_layout() -> list[dict[str, int]]:
    """The W4A8 order's positions today (``mxfp4_w4a8_bf16``): the lo value of byte b at s 8b+7,
    e1 e0 m 8b+4..2; the hi value of byte b at s 8b+5, e1 8b, e0 8b+1, m 8b-2."""
    lo = [{"s": 8 * b + 7, "e1": 8 * b + 4, "e0": 8 * b + 3, "m": 8 * b + 2} for b in range(4)]
    hi = [{"s": 8 * b + 5, "e1": 8 * b, "e0": 8 * b + 1, "m": (8 * b - 2) % 32}
          for b in range(4)]
    return lo + hi


def fp8_keeping_layouts():
    """Layouts with the lo values at their e4m3 positions (the FP8 lo register one mask) and
    the hi values byte-periodic in the other 16 bits (each bit type at one position of
    {6, 5, 1, 0} and one byte offset): (layout, hi positions, hi byte offsets)."""
    lo = shipped_layout()[:4]
    for q in itertools.permutations((6, 5, 1, 0)):
        pos = dict(zip(TYPES, q, strict=True))
        for d in itertools.product(range(4), repeat=3):
            off = dict(zip(TYPES, (0, *d), strict=True))
            hi = [{t: 8 * ((b + off[t]) % 4) + pos[t] for t in TYPES} for b in range(4)]
            yield lo + hi, pos, off


def main() -> int:
    target = bf16_target()
    print(f"bf16 registers as one rotation each (tilings of {target}): "
          f"{len(rotation_tilings(target))}")
    bf, _ = cost(shipped_layout(), "bf16")
    f8, _ = cost(shipped_layout(), "fp8")
    print("| layout | bf16 decode | FP8 decode |\n|---|---:|---:|")
    print(f"| shipped (W4A8 order) | {bf} | {f8} |")
    best = min(((cost(layout, "bf16")[0], cost(layout, "fp8")[0], pos, off)
                for layout, pos, off in fp8_keeping_layouts()), key=lambda r: (r[1] > 5, r[0]))
    print(f"| best with the FP8 lo values kept (hi at {best[2]}, byte offsets {best[3]}) | "
          f"{best[0]} | {best[1]} |")
    # three one-rotation registers and one of two: the bf16 optimum, and its FP8 price
    opt = bf16_optimal_layout()
    print(f"| bf16 optimum (three one-term registers, one of two) | {cost(opt, 'bf16')[0]} | "
          f"{cost(opt, 'fp8')[0]} |")
    return 0


def bf16_optimal_layout() -> list[dict[str, int]]:
    """One layout of the bf16 optimum (a search over rotation sets found them all at 4 SHF +
    5 LOP3, and all at an FP8 price of 11): registers one rotation each of the word by 0, 4
    and 10, the fourth by 6 for its bits in ``u`` and by 30 for the rest (its e1s)."""
    rots, a, b = (0, 4, 10), 6, 30
    u = {6, 7, 15, 22, 23, 31}  # the fourth register's bits from rotation a, the rest from b
    layout = [{t: (BF16[t] + 16 * h - r) % 32 for t in TYPES} for r in rots for h in (0, 1)]
    for h in (0, 1):
        layout.append({t: (BF16[t] + 16 * h - (a if BF16[t] + 16 * h in u else b)) % 32
                       for t in TYPES})
    assert sorted(p for v in layout for p in v.values()) == list(range(32)), "not a layout"
    return layout


if __name__ == "__main__":
    raise SystemExit(main())
