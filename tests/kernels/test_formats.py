"""Tests for deepinfer.kernels.formats: cache record and checkpoint byte layouts.

Hand-built byte strings are decoded to hand-computed values; random data checks that pack and
unpack agree with the fake quantizers bit for bit and that re-packing behaves as documented.
"""

import pytest
import torch

from deepinfer.kernels import formats
from deepinfer.kernels.reference import quant

E4M3_MAX_BYTE = 0x7E  # 448
E2M1_MAX_NIBBLE = 7  # 6.0


def _bits(t: torch.Tensor) -> torch.Tensor:
    width = {torch.float32: torch.int32, torch.bfloat16: torch.int16}
    return t.contiguous().view(width[t.dtype])


def _random_e4m3_bytes(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Random finite e4m3 bytes (magnitude 0x00..0x7E, random sign), uint8."""
    magnitude = torch.randint(0, E4M3_MAX_BYTE + 1, shape, generator=gen, dtype=torch.uint8)
    sign = torch.randint(0, 2, shape, generator=gen, dtype=torch.uint8) << 7
    return magnitude | sign


def _random_nibbles(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 16, shape, generator=gen, dtype=torch.uint8)


def _force_block_max(codes: torch.Tensor, block: int, max_code: int) -> torch.Tensor:
    """Set element 0 of every block of the last dim to ±max_code (keeping its sign bit).

    A block whose largest code is the top of the grid is what a fresh quantization produces for
    its own dequantized values, so such records must re-pack byte for byte.
    """
    codes = codes.clone()
    sign_bit = 0x80 if max_code == E4M3_MAX_BYTE else 0x8
    first = codes[..., ::block]
    codes[..., ::block] = (first & sign_bit) | max_code
    return codes


# --------------------------------------------------------------------------------------------
# Byte counts
# --------------------------------------------------------------------------------------------


def test_record_byte_counts():
    assert formats.window_record_bytes(512) == 528
    assert formats.window_record_bytes(64) == 66
    assert formats.compressed_record_bytes(512) == 288
    assert formats.compressed_record_bytes(64) == 36
    assert formats.index_key_record_bytes(128) == 68
    assert formats.index_key_record_bytes(32) == 17


@pytest.mark.parametrize(
    ("pack", "head_dim", "record_bytes"),
    [
        (formats.pack_window_kv, 512, 528),
        (formats.pack_window_kv, 64, 66),
        (formats.pack_compressed_kv, 512, 288),
        (formats.pack_compressed_kv, 64, 36),
        (formats.pack_index_key, 128, 68),
        (formats.pack_index_key, 32, 17),
    ],
)
def test_pack_output_shape_and_dtype(pack, head_dim, record_bytes):
    rec = pack(torch.randn(2, 3, head_dim))
    assert rec.shape == (2, 3, record_bytes) and rec.dtype == torch.uint8


@pytest.mark.parametrize(
    "fn",
    [formats.window_record_bytes, formats.compressed_record_bytes, formats.index_key_record_bytes],
)
def test_record_bytes_rejects_bad_head_dim(fn):
    with pytest.raises(ValueError, match="head_dim"):
        fn(24)
    with pytest.raises(ValueError, match="head_dim"):
        fn(0)


# --------------------------------------------------------------------------------------------
# Scalar encodings and nibbles
# --------------------------------------------------------------------------------------------


def test_ue8m0_hand_values_from_uint8_and_e8m0fnu():
    scale_exp = torch.tensor([127, 128, 126, 120], dtype=torch.uint8)
    expected = [1.0, 2.0, 0.5, 2.0**-7]
    assert formats.ue8m0_to_float(scale_exp).tolist() == expected
    assert formats.ue8m0_to_float(scale_exp.view(torch.float8_e8m0fnu)).tolist() == expected


def test_float_to_ue8m0_inverts_every_finite_byte():
    scale_exp = torch.arange(255, dtype=torch.uint8)
    pow2 = formats.ue8m0_to_float(scale_exp)
    assert torch.equal(formats.float_to_ue8m0(pow2), scale_exp)
    assert formats.float_to_ue8m0(torch.tensor([1.0, 2.0, 0.25])).tolist() == [127, 128, 125]


@pytest.mark.parametrize("bad", [3.0, 0.0, -2.0, float("inf"), float("nan"), 1.5 * 2.0**-126])
def test_float_to_ue8m0_rejects_non_powers_of_two(bad):
    with pytest.raises(ValueError, match="powers of two"):
        formats.float_to_ue8m0(torch.tensor([1.0, bad]))


def test_nibble_packing_hand_bytes():
    codes = torch.tensor([[1, 2, 15, 9, 0, 8]], dtype=torch.uint8)
    packed = formats.pack_nibbles(codes)
    assert packed.tolist() == [[0x21, 0x9F, 0x80]]
    assert torch.equal(formats.unpack_nibbles(packed), codes)
    assert torch.equal(formats.unpack_nibbles(packed.view(torch.int8)), codes)


def test_nibble_round_trip_random():
    gen = torch.Generator().manual_seed(0)
    codes = _random_nibbles((5, 7, 64), gen)
    assert torch.equal(formats.unpack_nibbles(formats.pack_nibbles(codes)), codes)
    with pytest.raises(ValueError, match="even"):
        formats.pack_nibbles(codes[..., :63])


# --------------------------------------------------------------------------------------------
# Hand-built records
# --------------------------------------------------------------------------------------------


def test_hand_built_528_byte_window_record():
    head_dim = 512
    rec = torch.zeros(528, dtype=torch.uint8)
    rec[:512] = 0x38  # every code 1.0
    rec[512:] = torch.arange(16, dtype=torch.uint8) + 119  # block j scale 2^(j - 8)
    rec[0] = 0x7E  # 448 in block 0 (scale 2^-8) -> 1.75
    rec[33] = 0xB8  # -1.0 in block 1 (scale 2^-7) -> -2^-7
    rec[300] = 0x00  # +0 in block 9
    rec[301] = 0x80  # -0 in block 9
    rec[511] = 0x01  # 2^-9 in block 15 (scale 2^7) -> 0.25
    expected = torch.tensor([2.0 ** (c // 32 - 8) for c in range(head_dim)])
    expected[0], expected[33], expected[300], expected[301], expected[511] = (
        1.75,
        -(2.0**-7),
        0,
        0,
        0.25,
    )
    for dtype in (torch.float32, torch.bfloat16):
        values = formats.unpack_window_kv(rec, head_dim, dtype=dtype)
        assert values.dtype == dtype and values.shape == (512,)
        assert torch.equal(values.to(torch.float32), expected)
    assert torch.signbit(formats.unpack_window_kv(rec, head_dim)[301])


def test_hand_built_compressed_record():
    head_dim = 32  # 16 nibble-pair bytes + 2 e4m3 scale bytes
    rec = torch.zeros(formats.compressed_record_bytes(head_dim), dtype=torch.uint8)
    rec[0] = 0x21  # channels 0, 1 = 0.5, 1.0
    rec[1] = 0x9F  # channels 2, 3 = -6, -0.5
    rec[8] = 0x07  # channels 16, 17 = 6, 0
    rec[16] = 0x40  # scale of channels 0..15 = 2.0
    rec[17] = 0x23  # scale of channels 16..31 = 0.171875
    expected = torch.zeros(head_dim)
    expected[:4] = torch.tensor([1.0, 2.0, -12.0, -1.0])
    expected[16] = 6 * 0.171875
    values = formats.unpack_compressed_kv(rec, head_dim, dtype=torch.float32)
    assert torch.equal(values, expected)


def test_hand_built_index_key_record():
    head_dim = 32  # 16 nibble-pair bytes + 1 ue8m0 byte
    rec = torch.zeros(17, dtype=torch.uint8)
    rec[0] = 0x21  # channels 0, 1 = 0.5, 1.0
    rec[15] = 0xE5  # channels 30, 31 = 3, -4
    rec[16] = 125  # scale 2^-2
    expected = torch.zeros(head_dim)
    expected[0], expected[1], expected[30], expected[31] = 0.125, 0.25, 0.75, -1.0
    values = formats.unpack_index_key(rec, head_dim, dtype=torch.float32)
    assert torch.equal(values, expected)


# --------------------------------------------------------------------------------------------
# Records against the fake quantizers, and re-packing
# --------------------------------------------------------------------------------------------

RECORD_FORMATS = [
    # name, pack, unpack, fake quantizer, head_dim
    ("window", formats.pack_window_kv, formats.unpack_window_kv, quant.fake_quant_fp8_block32, 512),
    ("window", formats.pack_window_kv, formats.unpack_window_kv, quant.fake_quant_fp8_block32, 64),
    (
        "compressed",
        formats.pack_compressed_kv,
        formats.unpack_compressed_kv,
        quant.fake_quant_fp4_e4m3_block16,
        512,
    ),
    (
        "index",
        formats.pack_index_key,
        formats.unpack_index_key,
        quant.fake_quant_fp4_ue8m0_block32,
        128,
    ),
    (
        "index",
        formats.pack_index_key,
        formats.unpack_index_key,
        quant.fake_quant_fp4_ue8m0_block32,
        32,
    ),
]


@pytest.mark.parametrize(("name", "pack", "unpack", "fake_quant", "head_dim"), RECORD_FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unpack_of_pack_equals_fake_quant_bitwise(name, pack, unpack, fake_quant, head_dim, dtype):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 16, head_dim, generator=gen) * torch.logspace(-3, 3, 16).unsqueeze(-1)
    x = x.to(dtype)
    values = unpack(pack(x), head_dim, dtype=dtype)
    assert values.shape == x.shape and values.dtype == dtype
    assert torch.equal(_bits(values), _bits(fake_quant(x)))
    assert torch.equal(values.to(torch.bfloat16).to(torch.float32), values.to(torch.float32))


def _block_max_magnitude(name: str, rec: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Largest |code| of each scale block, read straight from the record bytes."""
    if name == "window":
        codes = rec[..., :head_dim].contiguous().view(torch.float8_e4m3fn).to(torch.float32)
        return codes.abs().reshape(*rec.shape[:-1], head_dim // 32, 32).amax(-1)
    codes = formats.unpack_nibbles(rec[..., : head_dim // 2])
    block = 16 if name == "compressed" else 32
    values = quant.e2m1_decode(codes).abs()
    return values.reshape(*rec.shape[:-1], head_dim // block, block).amax(-1)


@pytest.mark.parametrize(("name", "pack", "unpack", "fake_quant", "head_dim"), RECORD_FORMATS)
def test_repack_of_random_records_keeps_values_and_bytes_except_boundary_blocks(
    name, pack, unpack, fake_quant, head_dim
):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(256, head_dim, generator=gen) * torch.logspace(-2, 2, 256).unsqueeze(-1)
    rec = pack(x)
    values = unpack(rec, head_dim)
    rec2 = pack(values)
    if name == "compressed":
        # Blocks with a normal e4m3 scale (>= 2^-6, byte >= 0x08) re-pack byte for byte; a
        # subnormal scale may re-quantize to different values (see test_quant).
        is_normal = rec[:, head_dim // 2 :] >= 0x08
        assert is_normal.any() and not is_normal.all()
        same_scale = rec2[:, head_dim // 2 :] == rec[:, head_dim // 2 :]
        same_codes = rec2[:, : head_dim // 2] == rec[:, : head_dim // 2]
        same_block = same_codes.reshape(-1, head_dim // 16, 8).all(-1) & same_scale
        assert bool(same_block[is_normal].all())
        return
    assert torch.equal(_bits(unpack(rec2, head_dim)), _bits(values))
    # ue8m0 blocks whose largest code is the lowest a fresh quantization gives (224 or 3)
    # re-encode with a halved scale; every other block re-packs byte for byte.
    block, num_code_bytes = (32, head_dim) if name == "window" else (32, head_dim // 2)
    num_blocks = head_dim // block
    boundary_code = 224.0 if name == "window" else 3.0
    is_boundary = _block_max_magnitude(name, rec, head_dim) == boundary_code
    code_bytes_per_block = num_code_bytes // num_blocks
    same_codes = (rec[:, :num_code_bytes] == rec2[:, :num_code_bytes]).reshape(
        -1, num_blocks, code_bytes_per_block
    )
    same_block = same_codes.all(-1) & (rec[:, num_code_bytes:] == rec2[:, num_code_bytes:])
    assert is_boundary.any() and not is_boundary.all()
    assert torch.equal(same_block, ~is_boundary)
    scale_step = rec2[:, num_code_bytes:].to(torch.int32) - rec[:, num_code_bytes:].to(torch.int32)
    assert torch.equal(scale_step, -is_boundary.to(torch.int32))


def _canonical_record(name: str, num_records: int, head_dim: int, gen: torch.Generator):
    """Random records whose every block reaches the top code: what pack emits for its output."""
    if name == "window":
        codes = _force_block_max(
            _random_e4m3_bytes((num_records, head_dim), gen), 32, E4M3_MAX_BYTE
        )
        scales = torch.randint(105, 200, (num_records, head_dim // 32), generator=gen)
        return torch.cat([codes, scales.to(torch.uint8)], dim=-1)
    block = 16 if name == "compressed" else 32
    codes = _force_block_max(_random_nibbles((num_records, head_dim), gen), block, E2M1_MAX_NIBBLE)
    if name == "compressed":
        scales = torch.randint(
            1, E4M3_MAX_BYTE + 1, (num_records, head_dim // block), generator=gen
        )
    else:
        scales = torch.randint(1, 253, (num_records, head_dim // block), generator=gen)
    return torch.cat([formats.pack_nibbles(codes), scales.to(torch.uint8)], dim=-1)


@pytest.mark.parametrize(("name", "pack", "unpack", "fake_quant", "head_dim"), RECORD_FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pack_unpack_pack_is_byte_identical_for_canonical_records(
    name, pack, unpack, fake_quant, head_dim, dtype
):
    gen = torch.Generator().manual_seed(3)
    rec = _canonical_record(name, 200, head_dim, gen)
    assert torch.equal(pack(unpack(rec, head_dim, dtype=dtype)), rec)


@pytest.mark.parametrize(
    ("pack", "head_dim"),
    [(formats.pack_window_kv, 48), (formats.pack_compressed_kv, 24), (formats.pack_index_key, 48)],
)
def test_pack_rejects_non_divisible_head_dim(pack, head_dim):
    with pytest.raises(ValueError, match="multiple of the block size"):
        pack(torch.randn(3, head_dim))


@pytest.mark.parametrize(
    ("unpack", "head_dim", "record_bytes"),
    [
        (formats.unpack_window_kv, 512, 528),
        (formats.unpack_compressed_kv, 512, 288),
        (formats.unpack_index_key, 128, 68),
    ],
)
def test_unpack_rejects_wrong_record_size_or_dtype(unpack, head_dim, record_bytes):
    unpack(torch.zeros(2, record_bytes, dtype=torch.uint8), head_dim)  # the right size works
    with pytest.raises(ValueError, match="uint8 records"):
        unpack(torch.zeros(2, record_bytes - 1, dtype=torch.uint8), head_dim)
    with pytest.raises(ValueError, match="uint8 records"):
        unpack(torch.zeros(2, record_bytes, dtype=torch.int8), head_dim)


# --------------------------------------------------------------------------------------------
# Dense FP8 weights (32×32 ue8m0 tiles)
# --------------------------------------------------------------------------------------------


def _dequant_fp8_weight_loop(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """W[r, c] = code[r, c] * 2^(S[r//32, c//32] - 127), one element at a time."""
    codes = weight.to(torch.float32).tolist()
    scale_exp = scale.view(torch.uint8).tolist()
    out = [
        [code * 2.0 ** (scale_exp[r // 32][c // 32] - 127) for c, code in enumerate(row)]
        for r, row in enumerate(codes)
    ]
    return torch.tensor(out, dtype=torch.float32)


def test_quantize_fp8_weight_odd_shape_dtypes_and_error_bound():
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(40, 70, generator=gen) * torch.logspace(-2, 2, 70)
    weight, scale = formats.quantize_fp8_weight(w)
    assert weight.dtype == torch.float8_e4m3fn and weight.shape == (40, 70)
    assert scale.dtype == torch.float8_e8m0fnu and scale.shape == (2, 3)
    deq = formats.dequantize_fp8_weight(weight, scale)
    assert deq.dtype == torch.float32 and deq.shape == (40, 70)
    assert torch.equal(deq, _dequant_fp8_weight_loop(weight, scale))
    # Normal e4m3 codes are within half an ulp (2^-4 relative); subnormal codes within 2^-10 * s.
    tile_scale = formats.ue8m0_to_float(scale).repeat_interleave(32, 0)[:40]
    tile_scale = tile_scale.repeat_interleave(32, 1)[:, :70]
    bound = torch.maximum(w.abs() * 2.0**-4, tile_scale * 2.0**-10)
    assert bool(((deq - w).abs() <= bound).all())
    # The tile's scale is pow2ceil(amax / 448): its largest code lies in [224, 448].
    tile_amax = torch.zeros(2, 3)
    for i in range(2):
        for j in range(3):
            tile_amax[i, j] = w[32 * i : 32 * i + 32, 32 * j : 32 * j + 32].abs().max()
    largest_code = tile_amax / formats.ue8m0_to_float(scale)
    assert bool(((largest_code > 224 * (1 - 2.0**-20)) & (largest_code <= 448)).all())


def test_dequantize_fp8_weight_hand_values():
    weight = torch.full((33, 40), 0x38, dtype=torch.uint8)  # every code 1.0
    weight[0, 0], weight[32, 39] = 0x7E, 0xBC  # 448 and -1.5
    scale = torch.tensor([[128, 126], [127, 120]], dtype=torch.uint8)  # 2, 0.5, 1, 2^-7
    deq = formats.dequantize_fp8_weight(
        weight.view(torch.float8_e4m3fn), scale.view(torch.float8_e8m0fnu)
    )
    assert deq[0, 0].item() == 896.0
    assert deq[31, 31].item() == 2.0 and deq[31, 32].item() == 0.5
    assert deq[32, 0].item() == 1.0 and deq[32, 39].item() == -1.5 * 2.0**-7


def test_fp8_weight_requantize_is_byte_identical_for_canonical_tiles():
    gen = torch.Generator().manual_seed(5)
    codes = _random_e4m3_bytes((40, 70), gen)
    for i in range(0, 40, 32):
        for j in range(0, 70, 32):
            codes[i, j] = (codes[i, j] & 0x80) | E4M3_MAX_BYTE
    scale = torch.randint(105, 200, (2, 3), generator=gen, dtype=torch.uint8)
    weight = codes.view(torch.float8_e4m3fn)
    deq = formats.dequantize_fp8_weight(weight, scale.view(torch.float8_e8m0fnu))
    weight2, scale2 = formats.quantize_fp8_weight(deq)
    assert torch.equal(weight2.view(torch.uint8), codes)
    assert torch.equal(scale2.view(torch.uint8), scale)


def test_fp8_weight_requantize_of_random_weights_keeps_values():
    gen = torch.Generator().manual_seed(6)
    w = torch.randn(96, 160, generator=gen)
    deq = formats.dequantize_fp8_weight(*formats.quantize_fp8_weight(w))
    assert torch.equal(formats.dequantize_fp8_weight(*formats.quantize_fp8_weight(deq)), deq)
    assert torch.equal(deq.to(torch.bfloat16).to(torch.float32), deq)


def test_dequantize_fp8_weight_rejects_nan_scale_and_bad_shapes():
    weight, scale = formats.quantize_fp8_weight(torch.randn(40, 70))
    nan_scale = scale.view(torch.uint8).clone()
    nan_scale[1, 2] = 255
    with pytest.raises(ValueError, match="NaN"):
        formats.dequantize_fp8_weight(weight, nan_scale.view(torch.float8_e8m0fnu))
    with pytest.raises(ValueError, match="scale shape"):
        formats.dequantize_fp8_weight(weight, scale[:, :2])
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        formats.dequantize_fp8_weight(weight.to(torch.float32), scale)
    with pytest.raises(ValueError, match="2-D"):
        formats.quantize_fp8_weight(torch.randn(2, 32, 32))


# --------------------------------------------------------------------------------------------
# Routed-expert MXFP4 weights
# --------------------------------------------------------------------------------------------


def test_dequantize_fp4_weight_hand_byte():
    packed = torch.zeros(2, 16, dtype=torch.uint8)
    packed[0, 0] = 0x21  # columns 0, 1 = 0.5, 1.0
    packed[1, 15] = 0x9F  # columns 30, 31 = -6, -0.5
    scale = torch.tensor([[127], [128]], dtype=torch.uint8).view(torch.float8_e8m0fnu)
    deq = formats.dequantize_fp4_weight(packed.view(torch.int8), scale)
    assert deq.shape == (2, 32) and deq.dtype == torch.float32
    assert deq[0, :3].tolist() == [0.5, 1.0, 0.0]
    assert deq[1, 30:].tolist() == [-12.0, -1.0]
    assert int((deq != 0).sum()) == 4


def test_fp4_weight_matches_q4e8_fake_quant_and_layout():
    gen = torch.Generator().manual_seed(7)
    w = torch.randn(24, 96, generator=gen)
    packed, scale = formats.quantize_fp4_weight(w)
    assert packed.dtype == torch.int8 and packed.shape == (24, 48)
    assert scale.dtype == torch.float8_e8m0fnu and scale.shape == (24, 3)
    deq = formats.dequantize_fp4_weight(packed, scale)
    assert torch.equal(deq, quant.fake_quant_fp4_ue8m0_block32(w))
    codes, scale_exp = quant.quant_fp4_ue8m0(w)
    low = packed.view(torch.uint8) & 0xF
    assert torch.equal(low, codes[:, 0::2]) and torch.equal(scale.view(torch.uint8), scale_exp)


def test_fp4_weight_requantize_is_byte_identical_for_canonical_blocks():
    gen = torch.Generator().manual_seed(8)
    codes = _force_block_max(_random_nibbles((24, 96), gen), 32, E2M1_MAX_NIBBLE)
    packed = formats.pack_nibbles(codes).view(torch.int8)
    scale = torch.randint(1, 253, (24, 3), generator=gen, dtype=torch.uint8)
    deq = formats.dequantize_fp4_weight(packed, scale.view(torch.float8_e8m0fnu))
    packed2, scale2 = formats.quantize_fp4_weight(deq)
    assert torch.equal(packed2, packed)
    assert torch.equal(scale2.view(torch.uint8), scale)


def test_fp4_weight_errors():
    with pytest.raises(ValueError, match="multiple of the block size"):
        formats.quantize_fp4_weight(torch.randn(4, 48))
    packed, scale = formats.quantize_fp4_weight(torch.randn(4, 64))
    with pytest.raises(ValueError, match="multiple of 32"):
        formats.dequantize_fp4_weight(packed[:, :8], scale)
    with pytest.raises(ValueError, match="scale shape"):
        formats.dequantize_fp4_weight(packed, scale[:, :1])
    nan_scale = scale.view(torch.uint8).clone()
    nan_scale[0, 0] = 255
    with pytest.raises(ValueError, match="NaN"):
        formats.dequantize_fp4_weight(packed, nan_scale)


# --------------------------------------------------------------------------------------------
# Engram FP8 rows
# --------------------------------------------------------------------------------------------


def test_fp8_rows_match_q8_fake_quant_and_shapes():
    gen = torch.Generator().manual_seed(9)
    w = torch.randn(10, 256, generator=gen) * torch.logspace(-3, 3, 10).unsqueeze(-1)
    codes, scale = formats.quantize_fp8_rows(w)
    assert codes.dtype == torch.float8_e4m3fn and codes.shape == (10, 256)
    assert scale.dtype == torch.float8_e8m0fnu and scale.shape == (10, 8)
    assert torch.equal(formats.dequantize_fp8_rows(codes, scale), quant.fake_quant_fp8_block32(w))


def test_fp8_rows_hand_values_use_per_row_scales():
    codes = torch.full((2, 64), 0x38, dtype=torch.uint8).view(torch.float8_e4m3fn)  # 1.0
    scale = torch.tensor([[127, 128], [126, 129]], dtype=torch.uint8)
    deq = formats.dequantize_fp8_rows(codes, scale)
    assert deq[:, 0].tolist() == [1.0, 0.5] and deq[:, 63].tolist() == [2.0, 4.0]


def test_fp8_rows_requantize_is_byte_identical_for_canonical_blocks():
    gen = torch.Generator().manual_seed(10)
    codes = _force_block_max(_random_e4m3_bytes((12, 256), gen), 32, E4M3_MAX_BYTE)
    scale = torch.randint(105, 200, (12, 8), generator=gen, dtype=torch.uint8)
    deq = formats.dequantize_fp8_rows(codes.view(torch.float8_e4m3fn), scale)
    codes2, scale2 = formats.quantize_fp8_rows(deq)
    assert torch.equal(codes2.view(torch.uint8), codes)
    assert torch.equal(scale2.view(torch.uint8), scale)


def test_fp8_rows_errors():
    with pytest.raises(ValueError, match="multiple of the block size"):
        formats.quantize_fp8_rows(torch.randn(3, 40))
    codes, scale = formats.quantize_fp8_rows(torch.randn(3, 64))
    nan_scale = scale.view(torch.uint8).clone()
    nan_scale[2, 1] = 255
    with pytest.raises(ValueError, match="NaN"):
        formats.dequantize_fp8_rows(codes, nan_scale)
    with pytest.raises(ValueError, match="scale shape"):
        formats.dequantize_fp8_rows(codes, scale[:2])
