"""Tests for deepinfer.kernels.reference.quant: grids, scales and the three block quantizers.

Oracles are independent of the code under test: hand-decoded values, Python's math.frexp for
powers of two, and brute-force nearest-neighbour searches over the enumerated e4m3/e2m1 grids.
"""

import math

import numpy as np
import pytest
import torch

from deepinfer.kernels.reference import quant

E2M1_TABLE = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Raw bit patterns, so that -0.0 != 0.0 and NaN == NaN in comparisons."""
    width = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
    return t.contiguous().view(width[t.dtype])


def _e4m3_grid() -> tuple[torch.Tensor, torch.Tensor]:
    """Non-negative finite e4m3fn values (float64) and their byte codes 0x00..0x7E."""
    codes = torch.arange(0, 0x7F, dtype=torch.uint8)
    return codes.view(torch.float8_e4m3fn).to(torch.float64), codes


def _nearest_even(x: torch.Tensor, grid: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Brute-force round of |x| to the sorted grid: nearest value, ties to the even code."""
    magnitude = x.abs().to(torch.float64).unsqueeze(-1)
    distance = (magnitude - grid).abs()
    best = distance.min(dim=-1, keepdim=True).values
    is_best = distance == best
    odd_penalty = (codes.to(torch.int64) % 2).to(torch.float64)
    choice = torch.where(is_best, odd_penalty, math.inf).argmin(dim=-1)
    return grid[choice] * torch.where(torch.signbit(x), -1.0, 1.0).to(torch.float64)


def _pow2ceil_oracle(t: float) -> float:
    mantissa, exponent = math.frexp(t)  # t = mantissa * 2^exponent, mantissa in [0.5, 1)
    return 2.0 ** (exponent - 1) if mantissa == 0.5 else 2.0**exponent


# --------------------------------------------------------------------------------------------
# pow2ceil and ue8m0
# --------------------------------------------------------------------------------------------


def test_pow2ceil_hand_values():
    t = torch.tensor([1.0, 1.0000001, 3.0, 0.75, 2.0**-126, 448.0, 1e-4 / 448, 2.0**126 * 1.5])
    expected = torch.tensor([1.0, 2.0, 4.0, 1.0, 2.0**-126, 512.0, 2.0**-22, 2.0**127])
    assert torch.equal(quant.pow2ceil(t), expected)
    assert quant.pow2ceil(t).dtype == torch.float32


def test_pow2ceil_matches_frexp_oracle_on_random_and_exact_powers():
    gen = torch.Generator().manual_seed(0)
    exponents = torch.randint(-120, 120, (2000,), generator=gen).to(torch.float32)
    t = torch.rand(2000, generator=gen) * 2.0**exponents + 2.0**-125
    t = torch.cat([t, 2.0**exponents, torch.nextafter(2.0**exponents, torch.tensor(math.inf))])
    expected = torch.tensor([_pow2ceil_oracle(v) for v in t.tolist()], dtype=torch.float32)
    assert torch.equal(quant.pow2ceil(t), expected)
    assert torch.equal(quant.pow2ceil_exponent(t), torch.log2(expected).to(torch.int32) + 127)


def test_ue8m0_decode_hand_values_and_nan():
    scale_exp = torch.tensor([127, 128, 126, 0, 1, 254, 255], dtype=torch.uint8)
    value = quant.ue8m0_decode(scale_exp)
    assert value[:6].tolist() == [1.0, 2.0, 0.5, 2.0**-127, 2.0**-126, 2.0**127]
    assert math.isnan(value[6].item())


def test_ue8m0_decode_agrees_with_torch_e8m0fnu_for_all_bytes():
    scale_exp = torch.arange(256, dtype=torch.uint8)
    ours = quant.ue8m0_decode(scale_exp)
    theirs = scale_exp.view(torch.float8_e8m0fnu).to(torch.float32)
    assert torch.equal(_bits(ours[:255]), _bits(theirs[:255]))
    assert torch.isnan(ours[255]) and torch.isnan(theirs[255])


# --------------------------------------------------------------------------------------------
# e4m3
# --------------------------------------------------------------------------------------------


def test_e4m3_hand_decoded_bytes():
    codes = torch.tensor([0x38, 0x7E, 0x01, 0xB8, 0x08, 0x3C, 0x40, 0x77], dtype=torch.uint8)
    values = codes.view(torch.float8_e4m3fn).to(torch.float32).tolist()
    assert values == [1.0, 448.0, 2.0**-9, -1.0, 2.0**-6, 1.5, 2.0, 240.0]


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (1.0625, 1.0),  # tie between 1.0 (mantissa 000) and 1.125 (001) -> even
        (1.1875, 1.25),  # tie between 1.125 (001) and 1.25 (010) -> even
        (232.0, 224.0),  # tie between 224 (110) and 240 (111)
        (248.0, 256.0),  # tie between 240 (111) and 256 (next binade, 000)
        (2.0**-10, 0.0),  # tie between 0 and the smallest subnormal 2^-9
        (1.5 * 2.0**-9, 2.0**-8),  # subnormal tie between codes 1 and 2
        (2.5 * 2.0**-9, 2.0**-8),  # subnormal tie between codes 2 and 3
        (-1.0625, -1.0),
        (1.07, 1.125),  # just above a tie
        (1000.0, 448.0),  # saturates
        (-1e30, -448.0),
    ],
)
def test_round_to_e4m3_ties_to_even_and_saturates(x, expected):
    assert quant.round_to_e4m3(torch.tensor([x])).item() == expected


def test_round_to_e4m3_matches_brute_force_grid():
    gen = torch.Generator().manual_seed(1)
    grid, codes = _e4m3_grid()
    midpoints = ((grid[1:] + grid[:-1]) / 2).to(torch.float32)  # exact in fp32
    x = torch.cat([torch.randn(3000, generator=gen) * 40, torch.randn(1000, generator=gen) * 0.01])
    x = torch.cat([x, midpoints, -midpoints, grid.to(torch.float32)])
    expected = _nearest_even(x, grid, codes).to(torch.float32)
    assert torch.equal(quant.round_to_e4m3(x), expected)


# --------------------------------------------------------------------------------------------
# e2m1
# --------------------------------------------------------------------------------------------


def test_e2m1_decode_table_including_sign():
    codes = torch.arange(16, dtype=torch.uint8)
    values = quant.e2m1_decode(codes)
    assert values.tolist() == E2M1_TABLE
    assert torch.signbit(values[8]) and values[8].item() == 0.0  # "-0" decodes to the value 0


@pytest.mark.parametrize(
    ("x", "expected_value", "expected_code"),
    [
        (0.25, 0.0, 0),
        (0.75, 1.0, 2),
        (1.25, 1.0, 2),
        (1.75, 2.0, 4),
        (2.5, 2.0, 4),
        (3.5, 4.0, 6),
        (5.0, 4.0, 6),
        (-0.75, -1.0, 10),
        (-5.0, -4.0, 14),
        (0.26, 0.5, 1),
        (5.01, 6.0, 7),
        (100.0, 6.0, 7),
        (-100.0, -6.0, 15),
    ],
)
def test_e2m1_ties_go_to_even_code(x, expected_value, expected_code):
    t = torch.tensor([x])
    assert quant.e2m1_encode(t).item() == expected_code
    assert quant.round_to_e2m1(t).item() == expected_value


def test_e2m1_negative_zero_keeps_sign_bit_but_has_value_zero():
    codes = quant.e2m1_encode(torch.tensor([-0.0, -0.2, 0.0, 0.2]))
    assert codes.tolist() == [8, 8, 0, 0]
    assert quant.e2m1_decode(codes).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_e2m1_encode_matches_brute_force_grid():
    gen = torch.Generator().manual_seed(2)
    grid = torch.tensor(E2M1_TABLE[:8], dtype=torch.float64)
    codes = torch.arange(8)
    midpoints = ((grid[1:] + grid[:-1]) / 2).to(torch.float32)
    x = torch.cat([torch.randn(4000, generator=gen) * 3, midpoints, -midpoints])
    expected = _nearest_even(x, grid, codes).to(torch.float32)
    assert torch.equal(quant.round_to_e2m1(x), expected)
    assert quant.e2m1_encode(x).dtype == torch.uint8
    assert int(quant.e2m1_encode(x).max()) <= 15


# --------------------------------------------------------------------------------------------
# Quantizers against a NumPy float32 statement of the spec formulas
# --------------------------------------------------------------------------------------------


def _spec_scales(x: torch.Tensor, block: int, floor: float, qmax: float, kind: str) -> np.ndarray:
    """Per-block scales straight from the spec, in NumPy float32 (float64 for the exponent)."""
    blocks = x.numpy().astype(np.float32).reshape(*x.shape[:-1], -1, block)
    amax = np.maximum(np.abs(blocks).max(axis=-1), np.float32(floor))
    if kind == "pow2":
        t = amax * np.float32(1.0 / qmax)  # float32 product
        return np.vectorize(_pow2ceil_oracle)(t.astype(np.float64))
    grid, codes = _e4m3_grid()
    quotient = torch.from_numpy((amax / np.float32(qmax)).astype(np.float32))
    return _nearest_even(quotient, grid, codes).numpy()


def test_quant_fp8_ue8m0_matches_spec_formula():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(8, 96, generator=gen) * torch.logspace(-6, 3, 8).unsqueeze(-1)
    x[0, :32] = 0.0  # an all-zero block uses the 1e-4 floor
    codes, scale_exp = quant.quant_fp8_ue8m0(x)
    assert codes.dtype == torch.float8_e4m3fn and codes.shape == (8, 96)
    assert scale_exp.dtype == torch.uint8 and scale_exp.shape == (8, 3)
    scale = _spec_scales(x, 32, 1e-4, 448.0, "pow2")
    assert torch.equal(scale_exp.to(torch.float64), torch.from_numpy(np.log2(scale) + 127))
    scaled = x.to(torch.float64) / torch.from_numpy(scale).repeat_interleave(32, dim=-1)
    grid, grid_codes = _e4m3_grid()
    expected = _nearest_even(scaled.clamp(-448, 448), grid, grid_codes)
    assert torch.equal(codes.to(torch.float64), expected)


def test_quant_fp4_ue8m0_matches_spec_formula():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(8, 64, generator=gen) * torch.logspace(-30, 30, 8).unsqueeze(-1)
    x[1, 32:] = 0.0  # floor 6 * 2^-126 -> scale 2^-126 (byte 1)
    codes, scale_exp = quant.quant_fp4_ue8m0(x)
    assert codes.dtype == torch.uint8 and scale_exp.shape == (8, 2)
    scale = _spec_scales(x, 32, 6 * 2.0**-126, 6.0, "pow2")
    assert torch.equal(scale_exp.to(torch.float64), torch.from_numpy(np.log2(scale) + 127))
    assert scale_exp[1, 1].item() == 1
    scaled = x.to(torch.float64) / torch.from_numpy(scale).repeat_interleave(32, dim=-1)
    grid = torch.tensor(E2M1_TABLE[:8], dtype=torch.float64)
    expected = _nearest_even(scaled.clamp(-6, 6), grid, torch.arange(8))
    assert torch.equal(quant.e2m1_decode(codes).to(torch.float64), expected)


def test_quant_fp4_e4m3_matches_spec_formula():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(8, 48, generator=gen) * torch.logspace(-4, 2, 8).unsqueeze(-1)
    codes, scale = quant.quant_fp4_e4m3(x)
    assert codes.dtype == torch.uint8 and scale.dtype == torch.float8_e4m3fn
    assert scale.shape == (8, 3)
    expected_scale = _spec_scales(x, 16, 6 * 2.0**-9, 6.0, "e4m3")
    assert torch.equal(scale.to(torch.float64), torch.from_numpy(expected_scale))
    # x/s is an fp32 true division before rounding to e2m1.
    scale_f32 = scale.to(torch.float32).repeat_interleave(16, dim=-1)
    grid = torch.tensor(E2M1_TABLE[:8], dtype=torch.float64)
    expected = _nearest_even((x / scale_f32).clamp(-6, 6), grid, torch.arange(8))
    assert torch.equal(quant.e2m1_decode(codes).to(torch.float64), expected)


def test_q4e4_scale_uses_true_division_by_six():
    # amax just below 6 * 1.1875: amax / 6 rounds to just below the e4m3 tie at 1.1875, so the
    # scale is 1.125 (0x39). Multiplying by f32(1/6) instead would land on the tie exactly and
    # round to the even neighbour 1.25 (0x3A).
    x = torch.zeros(16)
    x[0] = torch.nextafter(torch.tensor(6 * 1.1875), torch.tensor(0.0))
    _, scale = quant.quant_fp4_e4m3(x)
    assert scale.view(torch.uint8).tolist() == [0x39]


def test_quantizers_hand_computed_block_with_amax_one():
    x = torch.zeros(32)
    x[5] = 1.0
    x[6] = -0.5
    codes, scale_exp = quant.quant_fp8_ue8m0(x)
    assert scale_exp.tolist() == [119]  # pow2ceil(1/448) = 2^-8
    assert codes.to(torch.float32)[5:7].tolist() == [256.0, -128.0]
    codes, scale_exp = quant.quant_fp4_ue8m0(x)
    assert scale_exp.tolist() == [125]  # pow2ceil(1/6) = 2^-2
    assert codes[5:7].tolist() == [6, 12]  # 4.0 and -2.0
    codes, scale = quant.quant_fp4_e4m3(x[:16])
    assert scale.view(torch.uint8).tolist() == [0x23]  # e4m3(1/6) = 1.375 * 2^-3 = 0.171875
    assert codes[5:7].tolist() == [7, 13]  # 1/0.171875 = 5.82 -> 6; -2.91 -> -3
    assert quant.fake_quant_fp4_e4m3_block16(x[:16])[5].item() == 6 * 0.171875


# --------------------------------------------------------------------------------------------
# Fake quantizers
# --------------------------------------------------------------------------------------------

FAKE_QUANTIZERS = [
    ("q8_32", quant.fake_quant_fp8_block32, 32),
    ("q4e8_32", quant.fake_quant_fp4_ue8m0_block32, 32),
    ("q4e4_16", quant.fake_quant_fp4_e4m3_block16, 16),
]


@pytest.mark.parametrize(("name", "fake_quant", "block"), FAKE_QUANTIZERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fake_quant_keeps_dtype_and_equals_dequant_of_codes(name, fake_quant, block, dtype):
    gen = torch.Generator().manual_seed(6)
    x = (torch.randn(2, 3, 4 * block, generator=gen) * 3).to(dtype)
    y = fake_quant(x)
    assert y.shape == x.shape and y.dtype == dtype
    if name == "q8_32":
        expected = quant.dequant_fp8_ue8m0(*quant.quant_fp8_ue8m0(x), dtype=torch.float32)
    elif name == "q4e8_32":
        expected = quant.dequant_fp4_ue8m0(*quant.quant_fp4_ue8m0(x), dtype=torch.float32)
    else:
        expected = quant.dequant_fp4_e4m3(*quant.quant_fp4_e4m3(x), dtype=torch.float32)
    assert torch.equal(y.to(torch.float32), expected)
    assert not torch.equal(y, x)  # it really quantizes


@pytest.mark.parametrize(("name", "fake_quant", "block"), FAKE_QUANTIZERS)
def test_fake_quant_is_idempotent_in_value(name, fake_quant, block):
    gen = torch.Generator().manual_seed(7)
    # Magnitudes >= 0.1 keep Q4E4_16's scale out of the e4m3 subnormal range (see next test).
    x = torch.randn(64, 8 * block, generator=gen) * torch.logspace(-1, 3, 64).unsqueeze(-1)
    once = fake_quant(x)
    assert torch.equal(fake_quant(once), once)


def test_q4e4_is_not_idempotent_when_the_scale_is_an_e4m3_subnormal():
    # Spec semantics, kept on purpose: amax = 1.6 * 2^-9 * 6 gives s = e4m3(1.6 * 2^-9) = 2^-8,
    # x/s = 4.8 -> 4, value 2^-6. Re-quantizing: s' = e4m3(2^-6 / 6) = 2^-9, 8 -> clamp 6,
    # value 6 * 2^-9.
    x = torch.zeros(16)
    x[0] = 1.6 * 2.0**-9 * 6
    once = quant.fake_quant_fp4_e4m3_block16(x)
    assert once[0].item() == 2.0**-6
    assert quant.fake_quant_fp4_e4m3_block16(once)[0].item() == 6 * 2.0**-9


@pytest.mark.parametrize(("name", "fake_quant", "block"), FAKE_QUANTIZERS)
def test_dequantized_values_are_exact_in_bf16(name, fake_quant, block):
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(128, 4 * block, generator=gen) * torch.logspace(-8, 8, 128).unsqueeze(-1)
    y = fake_quant(x)
    assert torch.equal(y.to(torch.bfloat16).to(torch.float32), y)
    x_bf16 = x.to(torch.bfloat16)
    assert torch.equal(fake_quant(x_bf16).to(torch.float32), fake_quant(x_bf16.to(torch.float32)))


def test_every_e2m1_times_e4m3_product_is_exact_in_bf16():
    scales = torch.arange(1, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn)
    codes = torch.arange(16, dtype=torch.uint8)
    products = quant.e2m1_decode(codes).unsqueeze(-1) * scales.to(torch.float32)
    assert torch.equal(products.to(torch.bfloat16).to(torch.float32), products)
    e4m3 = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float32)
    for exponent in (-22, -8, 0, 8, 30):
        scaled = e4m3 * 2.0**exponent
        assert torch.equal(scaled.to(torch.bfloat16).to(torch.float32), scaled)


def test_scale_boundaries_amax_exactly_qmax_times_power_of_two():
    # amax = 448 * 2^3 exactly: amax * f32(1/448) rounds to 8, so s = 8 and the code is 448;
    # the next fp32 above it needs s = 16 and its code rounds to 224.
    x = torch.zeros(2, 32)
    x[0, 0] = 448.0 * 8
    x[1, 0] = torch.nextafter(torch.tensor(448.0 * 8), torch.tensor(math.inf))
    codes, scale_exp = quant.quant_fp8_ue8m0(x)
    assert scale_exp.tolist() == [[130], [131]]
    assert codes.to(torch.float32)[:, 0].tolist() == [448.0, 224.0]
    x = torch.zeros(2, 32)
    x[0, 0] = -6.0 * 2.0**-3
    x[1, 0] = -torch.nextafter(torch.tensor(6.0 * 2.0**-3), torch.tensor(math.inf))
    codes, scale_exp = quant.quant_fp4_ue8m0(x)
    assert scale_exp.tolist() == [[124], [125]]
    assert codes[:, 0].tolist() == [15, 13]  # -6 and -3


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        quant.quant_fp8_ue8m0,
        quant.quant_fp4_ue8m0,
        quant.quant_fp4_e4m3,
        quant.fake_quant_fp8_block32,
        quant.fake_quant_fp4_ue8m0_block32,
        quant.fake_quant_fp4_e4m3_block16,
    ],
)
def test_last_dim_not_divisible_raises(fn):
    with pytest.raises(ValueError, match="multiple of the block size"):
        fn(torch.randn(4, 40))


def test_dequant_rejects_mismatched_scales_and_dtypes():
    codes, scale_exp = quant.quant_fp8_ue8m0(torch.randn(2, 64))
    with pytest.raises(ValueError, match="scales of shape"):
        quant.dequant_fp8_ue8m0(codes, scale_exp[:, :1])
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        quant.dequant_fp8_ue8m0(codes.to(torch.float32), scale_exp)
    with pytest.raises(ValueError, match="uint8"):
        quant.dequant_fp8_ue8m0(codes, scale_exp.to(torch.int32))
