"""The MXFP4 unpack's inline PTX (kernels/triton/moe_experts.py), emulated on CPU
(``ptx_subset``): every byte value, at several scale bytes, gives exactly the e2m1 values times
2^(e - 127) in bf16 — the even (low) nibbles in $0/$1, the odd (high) in $2/$3. The interpreter
runs the tl twin of this code, so without this file only a GPU would check the asm."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

sys.path.insert(0, str(Path(__file__).parent))
from ptx_subset import bf16_to_float, float_to_bf16, run  # noqa: E402

from deepinfer.kernels.triton import mxfp4_unpack  # noqa: E402

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _e2m1(nibble: int) -> float:
    return (-1.0 if nibble & 8 else 1.0) * E2M1[nibble & 7]


def _scale_bits(e: int, one_mul: bool) -> int:
    """What the kernel passes as $5/$6 halves: 2^(e - 1) for the one-multiply form, else
    2^(e - 127) (the subnormal 0x0040 for e = 0)."""
    if one_mul:
        return (e + 126) << 7
    return 0x40 if e == 0 else e << 7


def test_emulator_rounds_to_nearest_even():
    assert float_to_bf16(1.0) == 0x3F80 and float_to_bf16(-2.0) == 0xC000
    assert float_to_bf16(1 + 2**-8) == 0x3F80  # tie -> even
    assert float_to_bf16(1 + 3 * 2**-8) == 0x3F82  # tie -> even (up)
    assert bf16_to_float(0x0001) == 2.0**-133 and float_to_bf16(2.0**-133) == 0x0001


@pytest.mark.parametrize("one_mul,exponents", [(False, [0, 1, 100, 127, 128, 200, 254]),
                                               (True, [0, 1, 100, 120, 127, 128])])
def test_unpack_asm_matches_e2m1_times_scale(one_mul, exponents):
    asm = str(mxfp4_unpack.E2M1X4_TO_BF16_ONE_MUL.value if one_mul
              else mxfp4_unpack.E2M1X4_TO_BF16.value)
    for e in exponents:
        s = _scale_bits(e, one_mul)
        scale_pair = s | (s << 16)
        for first in range(0, 256, 4):  # every byte value, four per packed register
            packed = [first, first + 1, first + 2, first + 3]
            word = sum(b << (8 * i) for i, b in enumerate(packed))
            out = run(asm, {4: word, 5: scale_pair, 6: scale_pair}, 4)
            halves = [(out[r] >> h) & 0xFFFF for r in range(4) for h in (0, 16)]
            even, odd = halves[:4], halves[4:]
            for j, byte in enumerate(packed):
                for got, nib in ((even[j], byte & 15), (odd[j], byte >> 4)):
                    want = _e2m1(nib) * 2.0 ** (e - 127)
                    if abs(want) >= 2.0**128:  # past bf16's (and fp32's) range: inf, as fp32
                        want = want * float("inf")  # dequantization in the reference gives
                    assert bf16_to_float(got) == want, (e, byte, nib, hex(got))
