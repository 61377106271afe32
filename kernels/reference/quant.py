"""Reference block quantizers of DeepSeek-V4.1 (model spec §2.1): codes, scales, fake quant.

Three block formats appear in the model's forward semantics. Every function works on arbitrary
leading dimensions and quantizes over the LAST dimension, which must be a multiple of the block
size. All arithmetic is fp32 (inputs are upcast first); scales are computed bit-exactly.

    Q8_32    e4m3 codes,  one ue8m0 scale per 32 channels  (window KV, GEMM inputs)
             amax = max(max|x|, 1e-4); s = pow2ceil(amax * f32(1/448)); q = e4m3(clamp(x/s, ±448))
    Q4E8_32  e2m1 codes,  one ue8m0 scale per 32 channels  (indexer Q and K, routed-expert weights)
             amax = max(max|x|, 6*2^-126); s = pow2ceil(amax * f32(1/6)); q = e2m1(clamp(x/s, ±6))
    Q4E4_16  e2m1 codes,  one e4m3 scale per 16 channels   (compressed main KV latent)
             amax = max(max|x|, 6*2^-9); s = e4m3(amax / 6); q = e2m1(clamp(x/s, ±6))

Encodings:
    ue8m0 byte e   the power of two 2^(e-127) (the fp32 exponent field of s); 255 is NaN.
    e4m3 (fn)      torch.float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; max 448.
    e2m1 nibble    bit 3 = sign, bits 0..2 = index into (0, .5, 1, 1.5, 2, 3, 4, 6). Codes are
                   returned one per uint8 (values 0..15); kernels.formats packs two per byte.

Every dequantized value (code × scale) is exactly representable in bf16: e4m3 × 2^k has 4
significant bits and e2m1 × e4m3 at most 6, against bf16's 8 (bf16 shares fp32's exponent range,
so only scales near 2^±127 that push a product out of range are exceptions).
"""

import torch

FP8_BLOCK = 32
"""Channels per ue8m0 scale in Q8_32."""
FP4_UE8M0_BLOCK = 32
"""Channels per ue8m0 scale in Q4E8_32."""
FP4_E4M3_BLOCK = 16
"""Channels per e4m3 scale in Q4E4_16."""

E4M3_MAX = 448.0
E2M1_MAX = 6.0

_FP8_AMAX_FLOOR = 1e-4
_FP4_UE8M0_AMAX_FLOOR = 6.0 * 2.0**-126
_FP4_E4M3_AMAX_FLOOR = 6.0 * 2.0**-9

# e2m1 magnitudes by code (bits 0..2); the sign is bit 3.
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between consecutive magnitudes, and whether a tie goes UP there: ties go to the even
# code, so the tie between codes k and k+1 rounds up exactly when k is odd.
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_E2M1_TIE_GOES_UP = (False, True, False, True, False, True, False)
_E2M1_SIGN_BIT = 8

_F32_EXPONENT_MASK = 0xFF
_F32_MANTISSA_MASK = 0x7FFFFF
_F32_MANTISSA_BITS = 23
_UE8M0_NAN = 255


# ---------------------------------------------------------------------------------------------
# Scalar grids
# ---------------------------------------------------------------------------------------------


def pow2ceil_exponent(t: torch.Tensor) -> torch.Tensor:
    """Biased exponent of pow2ceil(t), i.e. the ue8m0 byte of the scale, as int32.

    For fp32 t with exponent field E and mantissa field M this is ``E + (M != 0)``, read from the
    bit pattern. Meant for t > 0; non-finite t, and t > 2^127 (no ue8m0 power), give 255 (NaN).
    """
    exponent, rounded_up = _f32_exponent_rounded_up(t)
    return torch.where(exponent == _F32_EXPONENT_MASK, _UE8M0_NAN, rounded_up).to(torch.int32)


def pow2ceil(t: torch.Tensor) -> torch.Tensor:
    """Smallest power of two >= t, for normal fp32 t > 0: ``2 ** (E - 127 + (M != 0))``, bit-exact.

    Args:
        t: float tensor of positive values (any shape); upcast to fp32.
    Returns:
        fp32 tensor of the same shape, built as the bit pattern ``(E + (M != 0)) << 23``. Values
        above 2**127 overflow to inf and inf/NaN pass through. Following the formula, a subnormal
        t gives 2^-126 and t = 0 gives 2^-127.
    """
    t = t.to(torch.float32)
    exponent, rounded_up = _f32_exponent_rounded_up(t)
    result = (rounded_up << _F32_MANTISSA_BITS).view(torch.float32)
    result = torch.where(t == 0, 2.0**-127, result)
    return torch.where(exponent == _F32_EXPONENT_MASK, t, result)


def _f32_exponent_rounded_up(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 fields of t as int32: (exponent field E, E + (mantissa field M != 0))."""
    bits = t.to(torch.float32).contiguous().view(torch.int32)
    exponent = (bits >> _F32_MANTISSA_BITS) & _F32_EXPONENT_MASK
    has_mantissa = (bits & _F32_MANTISSA_MASK) != 0
    return exponent, exponent + has_mantissa.to(torch.int32)


def ue8m0_decode(scale_exp: torch.Tensor) -> torch.Tensor:
    """ue8m0 bytes (uint8, any shape) -> fp32 ``2 ** (e - 127)``; byte 255 -> NaN.

    Built from the fp32 bit pattern; byte 0 (2^-127) is the fp32 subnormal 0x00400000.
    """
    if scale_exp.dtype != torch.uint8:
        raise ValueError(f"ue8m0 scales must be uint8 bytes, got {scale_exp.dtype}")
    exponent = scale_exp.to(torch.int32)
    bits = exponent << _F32_MANTISSA_BITS
    bits = torch.where(exponent == 0, 1 << (_F32_MANTISSA_BITS - 1), bits)  # 2^-127, subnormal
    value = bits.view(torch.float32)
    return torch.where(exponent == _UE8M0_NAN, float("nan"), value)


def round_to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round to the e4m3fn grid (round-to-nearest-even, saturating at ±448); returns fp32.

    NaN stays NaN. Subnormals (multiples of 2^-9 below 2^-6) are kept.
    """
    return _to_e4m3(x).to(torch.float32)


def _to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """x -> float8_e4m3fn with explicit clamping to ±448 (RNE via torch's conversion)."""
    return x.to(torch.float32).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Round to the e2m1 grid and return nibble codes (uint8 in 0..15, same shape as x).

    Magnitude rounds to nearest with ties to the even code (0.25->0, 0.75->1, 1.25->1, 1.75->2,
    2.5->2, 3.5->4, 5->4) and saturates at 6. The sign bit (8) copies x's sign bit, so -0.0 and
    negative values that round to zero give code 8 ("-0"), which decodes to the value 0.
    NaN encodes as code 0 or 8 (callers propagate NaN through the scale instead).
    """
    x = x.to(torch.float32)
    magnitude = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for midpoint, tie_goes_up in zip(_E2M1_MIDPOINTS, _E2M1_TIE_GOES_UP, strict=True):
        above = magnitude >= midpoint if tie_goes_up else magnitude > midpoint
        code += above.to(torch.uint8)
    return code | (torch.signbit(x).to(torch.uint8) * _E2M1_SIGN_BIT)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """Nibble codes (integer tensor, values 0..15; higher bits ignored) -> fp32 e2m1 values.

    Table: [0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, -1, -1.5, -2, -3, -4, -6]; code 8 gives -0.0.
    Computed from the code's bits (exponent e = bits 1-2, mantissa m = bit 0): e = 0 gives
    m / 2, else (1 + m / 2) * 2^(e - 1). No table tensor is built, so nothing is copied to the
    device (the op may run inside a CUDA-graph capture).
    """
    c = codes.to(torch.int32) & 0xF
    e, m = (c >> 1) & 3, (c & 1).to(torch.float32)
    magnitude = torch.where(e == 0, 0.5 * m, (1.0 + 0.5 * m) * torch.exp2((e - 1).float()))
    return torch.where((c & 8) != 0, -magnitude, magnitude)


def round_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round to the signed e2m1 grid (ties to the even code, saturating at ±6); returns fp32."""
    return e2m1_decode(e2m1_encode(x))


# ---------------------------------------------------------------------------------------------
# Block helpers
# ---------------------------------------------------------------------------------------------


def _blocked(x: torch.Tensor, block: int, what: str) -> torch.Tensor:
    """[..., D] -> fp32 [..., D/block, block]; ValueError unless block divides D (D > 0)."""
    if x.dim() == 0:
        raise ValueError(f"{what}: expected at least one dimension, got a scalar")
    num_channels = x.shape[-1]
    if num_channels == 0 or num_channels % block != 0:
        raise ValueError(
            f"{what}: last dimension {num_channels} must be a positive multiple of the "
            f"block size {block}"
        )
    return x.to(torch.float32).reshape(*x.shape[:-1], num_channels // block, block)


def _check_scales(codes: torch.Tensor, scales: torch.Tensor, block: int, what: str) -> None:
    """Codes [..., D] must pair with scales [..., D/block]."""
    expected = (*codes.shape[:-1], codes.shape[-1] // block)
    if codes.shape[-1] % block != 0 or tuple(scales.shape) != expected:
        raise ValueError(
            f"{what}: codes of shape {tuple(codes.shape)} with block {block} need scales of "
            f"shape {expected}, got {tuple(scales.shape)}"
        )


def _block_amax(blocks: torch.Tensor, floor: float) -> torch.Tensor:
    """fp32 [..., n, block] -> fp32 [..., n, 1]: max(max|x|, floor); NaN if the block has NaN."""
    return blocks.abs().amax(dim=-1, keepdim=True).clamp_min(floor)


# ---------------------------------------------------------------------------------------------
# Q8_32: e4m3 codes with ue8m0 scales
# ---------------------------------------------------------------------------------------------


def quant_fp8_ue8m0(x: torch.Tensor, block: int = FP8_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """Q8_32 quantization.

    Args:
        x: float tensor [..., D], D a multiple of ``block``.
    Returns:
        codes: float8_e4m3fn [..., D], q = e4m3(clamp(x/s, -448, 448)).
        scale_exp: uint8 [..., D/block], the ue8m0 byte log2(s) + 127 of each block's scale
            s = pow2ceil(max(max|x|, 1e-4) * f32(1/448)).
    """
    blocks = _blocked(x, block, "quant_fp8_ue8m0")
    amax = _block_amax(blocks, _FP8_AMAX_FLOOR)
    scale_exp = pow2ceil_exponent(amax * torch.tensor(1.0 / E4M3_MAX, dtype=torch.float32))
    scale = ue8m0_decode(scale_exp.to(torch.uint8))
    codes = _to_e4m3(blocks / scale)
    return codes.reshape(x.shape), scale_exp.squeeze(-1).to(torch.uint8)


def dequant_fp8_ue8m0(
    codes: torch.Tensor,
    scale_exp: torch.Tensor,
    block: int = FP8_BLOCK,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Inverse of :func:`quant_fp8_ue8m0`: codes e4m3 [..., D] × 2^(scale_exp-127) [..., D/block].

    Returns ``dtype`` [..., D]; the product is formed in fp32 (exact) and then cast.
    """
    if codes.dtype != torch.float8_e4m3fn:
        raise ValueError(f"dequant_fp8_ue8m0: codes must be float8_e4m3fn, got {codes.dtype}")
    _check_scales(codes, scale_exp, block, "dequant_fp8_ue8m0")
    blocks = _blocked(codes, block, "dequant_fp8_ue8m0")
    values = blocks * ue8m0_decode(scale_exp).unsqueeze(-1)
    return values.reshape(codes.shape).to(dtype)


def fake_quant_fp8_block32(x: torch.Tensor) -> torch.Tensor:
    """Q8_32 quantize -> dequantize; same shape and dtype as x ([..., D], D % 32 == 0)."""
    codes, scale_exp = quant_fp8_ue8m0(x, FP8_BLOCK)
    return dequant_fp8_ue8m0(codes, scale_exp, FP8_BLOCK, dtype=x.dtype)


# ---------------------------------------------------------------------------------------------
# Q4E8_32: e2m1 codes with ue8m0 scales
# ---------------------------------------------------------------------------------------------


def quant_fp4_ue8m0(
    x: torch.Tensor, block: int = FP4_UE8M0_BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4E8_32 quantization (MXFP4-like).

    Args:
        x: float tensor [..., D], D a multiple of ``block``.
    Returns:
        codes: uint8 [..., D], one e2m1 nibble code (0..15) per element, q = e2m1(clamp(x/s, ±6)).
        scale_exp: uint8 [..., D/block], the ue8m0 byte of each block's scale
            s = pow2ceil(max(max|x|, 6*2^-126) * f32(1/6)).
    """
    blocks = _blocked(x, block, "quant_fp4_ue8m0")
    amax = _block_amax(blocks, _FP4_UE8M0_AMAX_FLOOR)
    scale_exp = pow2ceil_exponent(amax * torch.tensor(1.0 / E2M1_MAX, dtype=torch.float32))
    scale = ue8m0_decode(scale_exp.to(torch.uint8))
    codes = e2m1_encode((blocks / scale).clamp(-E2M1_MAX, E2M1_MAX))
    return codes.reshape(x.shape), scale_exp.squeeze(-1).to(torch.uint8)


def dequant_fp4_ue8m0(
    codes: torch.Tensor,
    scale_exp: torch.Tensor,
    block: int = FP4_UE8M0_BLOCK,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Inverse of :func:`quant_fp4_ue8m0`: e2m1(codes) [..., D] × 2^(scale_exp-127) [..., D/block].

    Returns ``dtype`` [..., D]; the product is formed in fp32 (exact) and then cast.
    """
    _check_scales(codes, scale_exp, block, "dequant_fp4_ue8m0")
    blocks = _blocked(e2m1_decode(codes), block, "dequant_fp4_ue8m0")
    values = blocks * ue8m0_decode(scale_exp).unsqueeze(-1)
    return values.reshape(codes.shape).to(dtype)


def fake_quant_fp4_ue8m0_block32(x: torch.Tensor) -> torch.Tensor:
    """Q4E8_32 quantize -> dequantize; same shape and dtype as x ([..., D], D % 32 == 0)."""
    codes, scale_exp = quant_fp4_ue8m0(x, FP4_UE8M0_BLOCK)
    return dequant_fp4_ue8m0(codes, scale_exp, FP4_UE8M0_BLOCK, dtype=x.dtype)


# ---------------------------------------------------------------------------------------------
# Q4E4_16: e2m1 codes with e4m3 scales
# ---------------------------------------------------------------------------------------------


def quant_fp4_e4m3(
    x: torch.Tensor, block: int = FP4_E4M3_BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4E4_16 quantization (NVFP4 without the global scale).

    Args:
        x: float tensor [..., D], D a multiple of ``block``.
    Returns:
        codes: uint8 [..., D], e2m1 nibble codes, q = e2m1(clamp(x/s, ±6)) with fp32 true division.
        scale: float8_e4m3fn [..., D/block], s = e4m3(max(max|x|, 6*2^-9) / 6) (saturating at 448,
            so blocks with amax > 2688 clip to ±6·448).
    """
    blocks = _blocked(x, block, "quant_fp4_e4m3")
    amax = _block_amax(blocks, _FP4_E4M3_AMAX_FLOOR)
    scale = _to_e4m3(amax / torch.full_like(amax, E2M1_MAX))  # elementwise true division
    codes = e2m1_encode((blocks / scale.to(torch.float32)).clamp(-E2M1_MAX, E2M1_MAX))
    return codes.reshape(x.shape), scale.squeeze(-1)


def dequant_fp4_e4m3(
    codes: torch.Tensor,
    scale: torch.Tensor,
    block: int = FP4_E4M3_BLOCK,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Inverse of :func:`quant_fp4_e4m3`: e2m1(codes) [..., D] × scale e4m3 [..., D/block]."""
    if scale.dtype != torch.float8_e4m3fn:
        raise ValueError(f"dequant_fp4_e4m3: scale must be float8_e4m3fn, got {scale.dtype}")
    _check_scales(codes, scale, block, "dequant_fp4_e4m3")
    blocks = _blocked(e2m1_decode(codes), block, "dequant_fp4_e4m3")
    values = blocks * scale.to(torch.float32).unsqueeze(-1)
    return values.reshape(codes.shape).to(dtype)


def fake_quant_fp4_e4m3_block16(x: torch.Tensor) -> torch.Tensor:
    """Q4E4_16 quantize -> dequantize; same shape and dtype as x ([..., D], D % 16 == 0)."""
    codes, scale = quant_fp4_e4m3(x, FP4_E4M3_BLOCK)
    return dequant_fp4_e4m3(codes, scale, FP4_E4M3_BLOCK, dtype=x.dtype)
