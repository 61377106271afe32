"""Byte layouts of the V4.1 caches (model spec §3.1) and quantized checkpoint tensors (§4.3).

Pure torch. Cache records are uint8 rows with the quantized data first and the 1-byte scales
after it; checkpoint tensors use the safetensors dtypes (F8_E4M3, F8_E8M0, I8). Scale bytes:

    ue8m0 byte e   2^(e - 127); byte 255 is NaN (torch.float8_e8m0fnu, same bits as uint8)
    e4m3 byte      torch.float8_e4m3fn
    e2m1 nibble    bit 3 = sign, bits 0..2 index (0, .5, 1, 1.5, 2, 3, 4, 6); two per byte, element
                   2k in the LOW nibble and element 2k+1 in the HIGH nibble of byte k

Cache records (per token / per entry, D = head_dim):

    window KV      528 B for D=512: D e4m3 bytes | D/32 ue8m0 bytes            (Q8_32)
    compressed KV  288 B for D=512: D/2 e2m1 pair bytes | D/16 e4m3 bytes     (Q4E4_16)
    index key       68 B for D=128: D/2 e2m1 pair bytes | D/32 ue8m0 bytes    (Q4E8_32)

The pack functions apply the quantizer themselves, so ``unpack(pack(x)) == fake_quant(x)``
bit for bit. Re-packing unpacked records keeps the values but not always the bytes: a
ue8m0-scaled block whose largest code is the smallest a fresh quantization can give (e4m3 224 in
window records, e2m1 3 in index keys) re-encodes with its scale halved and its codes doubled.
Compressed records re-pack byte for byte while their e4m3 scales are normal (>= 2^-6).
"""

import torch

from deepinfer.kernels.reference import quant

WEIGHT_FP8_TILE = 32
"""Rows and columns per ue8m0 scale of dense FP8 weights (32×32 tiles)."""
WEIGHT_FP4_BLOCK = 32
"""Input columns per ue8m0 scale of routed-expert FP4 weights."""
ROWS_FP8_BLOCK = 32
"""Columns per ue8m0 scale of FP8 engram table rows."""

_UE8M0_NAN_BYTE = 255
_NIBBLE_MASK = 0xF
_NIBBLE_BITS = 4


# ---------------------------------------------------------------------------------------------
# Scalar encodings
# ---------------------------------------------------------------------------------------------


def ue8m0_to_float(u8: torch.Tensor) -> torch.Tensor:
    """ue8m0 scales (uint8 or float8_e8m0fnu, any shape) -> fp32 ``2 ** (e - 127)``; 255 -> NaN."""
    return quant.ue8m0_decode(_as_ue8m0_bytes(u8, "ue8m0_to_float"))


def float_to_ue8m0(pow2: torch.Tensor) -> torch.Tensor:
    """Exact powers of two 2^k, -127 <= k <= 127 (float tensor, any shape) -> uint8 bytes k + 127.

    View the result as ``torch.float8_e8m0fnu`` to store it. Raises ValueError for any value that
    is not such a power of two (zero, negative, non-finite, or with mantissa bits).
    """
    pow2 = pow2.to(torch.float32)
    mantissa, exponent = torch.frexp(pow2)  # pow2 = mantissa * 2^exponent, mantissa in [0.5, 1)
    biased = exponent.to(torch.int32) - 1 + 127
    is_valid = (mantissa == 0.5) & (biased >= 0) & (biased < _UE8M0_NAN_BYTE)
    if not bool(is_valid.all()):
        bad = pow2[~is_valid].flatten()[:4].tolist()
        raise ValueError(
            f"float_to_ue8m0: values must be powers of two in [2^-127, 2^127]; got {bad}"
        )
    return biased.to(torch.uint8)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Nibble codes uint8 [..., D] (values 0..15, D even) -> uint8 [..., D/2].

    Byte k = codes[2k] | codes[2k+1] << 4 (even element in the low nibble).
    """
    if codes.dim() == 0 or codes.shape[-1] % 2 != 0:
        raise ValueError(
            f"pack_nibbles: last dimension must be even, got shape {tuple(codes.shape)}"
        )
    pairs = codes.to(torch.uint8).reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    low, high = pairs[..., 0] & _NIBBLE_MASK, pairs[..., 1] & _NIBBLE_MASK
    return low | (high << _NIBBLE_BITS)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """uint8 (or int8) bytes [..., B] -> nibble codes uint8 [..., 2B].

    Element 2k is the low nibble of byte k and element 2k+1 its high nibble.
    """
    packed = packed.view(torch.uint8) if packed.dtype == torch.int8 else packed
    if packed.dtype != torch.uint8:
        raise ValueError(f"unpack_nibbles: expected uint8 or int8 bytes, got {packed.dtype}")
    pairs = torch.stack([packed & _NIBBLE_MASK, packed >> _NIBBLE_BITS], dim=-1)
    return pairs.reshape(*packed.shape[:-1], packed.shape[-1] * 2)


# ---------------------------------------------------------------------------------------------
# Cache records
# ---------------------------------------------------------------------------------------------


def window_record_bytes(head_dim: int) -> int:
    """Bytes per window-KV token: D e4m3 codes + D/32 ue8m0 scales (528 for D=512)."""
    _check_head_dim(head_dim, quant.FP8_BLOCK, "window_record_bytes")
    return head_dim + head_dim // quant.FP8_BLOCK


def pack_window_kv(x: torch.Tensor) -> torch.Tensor:
    """Q8_32-quantize x and lay it out as window-KV records.

    Args:
        x: float tensor [..., D], D a multiple of 32 (post-RoPE K=V rows).
    Returns:
        uint8 [..., D + D/32]: byte c (0 <= c < D) is the e4m3 code of channel c; byte D + j is
        the ue8m0 scale of channels [32j, 32j + 32).
    """
    codes, scale_exp = quant.quant_fp8_ue8m0(x, quant.FP8_BLOCK)
    return torch.cat([codes.view(torch.uint8), scale_exp], dim=-1)


def unpack_window_kv(
    rec: torch.Tensor, head_dim: int, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """Window-KV records uint8 [..., D + D/32] (layout of :func:`pack_window_kv`) -> dtype [..., D].

    Channel c = e4m3(byte c) * 2^(byte[D + c//32] - 127); a scale byte of 255 yields NaN.
    """
    _check_record(rec, window_record_bytes(head_dim), "unpack_window_kv")
    codes = rec[..., :head_dim].contiguous().view(torch.float8_e4m3fn)
    scale_exp = rec[..., head_dim:].contiguous()
    return quant.dequant_fp8_ue8m0(codes, scale_exp, quant.FP8_BLOCK, dtype=dtype)


def compressed_record_bytes(head_dim: int) -> int:
    """Bytes per compressed-KV entry: D/2 e2m1 pair bytes + D/16 e4m3 scales (288 for D=512)."""
    _check_head_dim(head_dim, quant.FP4_E4M3_BLOCK, "compressed_record_bytes")
    return head_dim // 2 + head_dim // quant.FP4_E4M3_BLOCK


def pack_compressed_kv(x: torch.Tensor) -> torch.Tensor:
    """Q4E4_16-quantize x and lay it out as compressed-KV records.

    Args:
        x: float tensor [..., D], D a multiple of 16 (post-RoPE compressed latents).
    Returns:
        uint8 [..., D/2 + D/16]: byte k (0 <= k < D/2) holds channel 2k's e2m1 code in its low
        nibble and channel 2k+1's in its high nibble; byte D/2 + j is the e4m3 scale of channels
        [16j, 16j + 16).
    """
    codes, scale = quant.quant_fp4_e4m3(x, quant.FP4_E4M3_BLOCK)
    return torch.cat([pack_nibbles(codes), scale.view(torch.uint8)], dim=-1)


def unpack_compressed_kv(
    rec: torch.Tensor, head_dim: int, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """Compressed-KV records uint8 [..., D/2 + D/16] (see :func:`pack_compressed_kv`) -> [..., D].

    Channel c = e2m1(nibble c) * e4m3(byte[D/2 + c//16]).
    """
    _check_record(rec, compressed_record_bytes(head_dim), "unpack_compressed_kv")
    codes = unpack_nibbles(rec[..., : head_dim // 2])
    scale = rec[..., head_dim // 2 :].contiguous().view(torch.float8_e4m3fn)
    return quant.dequant_fp4_e4m3(codes, scale, quant.FP4_E4M3_BLOCK, dtype=dtype)


def index_key_record_bytes(head_dim: int) -> int:
    """Bytes per index-key entry: D/2 e2m1 pair bytes + D/32 ue8m0 scales (68 for D=128)."""
    _check_head_dim(head_dim, quant.FP4_UE8M0_BLOCK, "index_key_record_bytes")
    return head_dim // 2 + head_dim // quant.FP4_UE8M0_BLOCK


def pack_index_key(x: torch.Tensor) -> torch.Tensor:
    """Q4E8_32-quantize x and lay it out as index-key records.

    Args:
        x: float tensor [..., D], D a multiple of 32 (post-RoPE indexer keys).
    Returns:
        uint8 [..., D/2 + D/32]: byte k (0 <= k < D/2) holds channel 2k's e2m1 code in its low
        nibble and channel 2k+1's in its high nibble; byte D/2 + j is the ue8m0 scale of
        channels [32j, 32j + 32).
    """
    codes, scale_exp = quant.quant_fp4_ue8m0(x, quant.FP4_UE8M0_BLOCK)
    return torch.cat([pack_nibbles(codes), scale_exp], dim=-1)


def unpack_index_key(
    rec: torch.Tensor, head_dim: int, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """Index-key records uint8 [..., D/2 + D/32] (see :func:`pack_index_key`) -> dtype [..., D].

    Channel c = e2m1(nibble c) * 2^(byte[D/2 + c//32] - 127); a scale byte of 255 yields NaN.
    """
    _check_record(rec, index_key_record_bytes(head_dim), "unpack_index_key")
    codes = unpack_nibbles(rec[..., : head_dim // 2])
    scale_exp = rec[..., head_dim // 2 :].contiguous()
    return quant.dequant_fp4_ue8m0(codes, scale_exp, quant.FP4_UE8M0_BLOCK, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Checkpoint tensors
# ---------------------------------------------------------------------------------------------


def quantize_fp8_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense FP8 weight with one ue8m0 scale per 32×32 tile (writes synthetic checkpoints).

    The scale choice is Q8_32's applied to a whole tile: s = pow2ceil(max(amax, 1e-4) * f32(1/448))
    with amax = max|w| over the tile (edge tiles use only the elements that exist), and
    code = e4m3(clamp(w / s, -448, 448)).

    Args:
        w: float tensor [O, I]; O and I need not be multiples of 32.
    Returns:
        weight: float8_e4m3fn [O, I].
        scale: float8_e8m0fnu [ceil(O/32), ceil(I/32)]; tile (i, j) covers rows 32i..32i+31 and
            columns 32j..32j+31.
    """
    _check_matrix(w, "quantize_fp8_weight")
    tile = WEIGHT_FP8_TILE
    num_rows, num_cols = w.shape
    num_row_tiles, num_col_tiles = -(-num_rows // tile), -(-num_cols // tile)
    padded = w.new_zeros(num_row_tiles * tile, num_col_tiles * tile, dtype=torch.float32)
    padded[:num_rows, :num_cols] = w.to(torch.float32)  # zero padding never raises a tile's amax
    # [Ro*32, Co*32] -> [Ro, Co, 32*32]: one Q8 block per tile.
    tiles = padded.reshape(num_row_tiles, tile, num_col_tiles, tile).permute(0, 2, 1, 3)
    tiles = tiles.reshape(num_row_tiles, num_col_tiles, tile * tile)
    codes, scale_exp = quant.quant_fp8_ue8m0(tiles, block=tile * tile)
    codes = codes.view(torch.uint8).reshape(num_row_tiles, num_col_tiles, tile, tile)
    codes = codes.permute(0, 2, 1, 3).reshape(num_row_tiles * tile, num_col_tiles * tile)
    weight = codes[:num_rows, :num_cols].contiguous().view(torch.float8_e4m3fn)
    return weight, scale_exp.reshape(num_row_tiles, num_col_tiles).view(torch.float8_e8m0fnu)


def dequantize_fp8_weight(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Dense FP8 weight -> fp32 [O, I]: ``W[r, c] = code[r, c] * 2^(S[r//32, c//32] - 127)``.

    Args:
        weight: float8_e4m3fn [O, I].
        scale: float8_e8m0fnu (or uint8) [ceil(O/32), ceil(I/32)].
    Raises:
        ValueError on wrong dtypes or shapes, or on a scale byte of 255 (NaN in ue8m0).
    """
    _check_matrix(weight, "dequantize_fp8_weight", torch.float8_e4m3fn)
    tile = WEIGHT_FP8_TILE
    num_rows, num_cols = weight.shape
    expected = (-(-num_rows // tile), -(-num_cols // tile))
    scale_exp = _checkpoint_scale_bytes(scale, expected, "dequantize_fp8_weight")
    num_row_tiles, num_col_tiles = expected
    values = weight.new_zeros(num_row_tiles * tile, num_col_tiles * tile, dtype=torch.float32)
    values[:num_rows, :num_cols] = weight.to(torch.float32)
    # [Ro*32, Co*32] viewed as [Ro, 32, Co, 32] times the tile scales broadcast as [Ro, 1, Co, 1].
    tiles = values.view(num_row_tiles, tile, num_col_tiles, tile)
    tiles *= quant.ue8m0_decode(scale_exp)[:, None, :, None]
    return values[:num_rows, :num_cols].contiguous()


def quantize_fp4_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Routed-expert MXFP4 weight: Q4E8_32 per row over each 32 input columns.

    Args:
        w: float tensor [O, I], I a multiple of 32.
    Returns:
        packed: int8 [O, I/2]; byte k of a row holds column 2k's e2m1 code in its low nibble and
            column 2k+1's in its high nibble.
        scale: float8_e8m0fnu [O, I/32]; S[r, j] scales columns 32j..32j+31 of row r.
    """
    _check_matrix(w, "quantize_fp4_weight")
    codes, scale_exp = quant.quant_fp4_ue8m0(w, WEIGHT_FP4_BLOCK)
    return pack_nibbles(codes).view(torch.int8), scale_exp.view(torch.float8_e8m0fnu)


def dequantize_fp4_weight(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """MXFP4 weight -> fp32 [O, I]: ``W[r, c] = e2m1(nibble(r, c)) * 2^(S[r, c//32] - 127)``.

    Args:
        packed: int8 (or uint8) [O, I/2], layout of :func:`quantize_fp4_weight`. Nibble table:
            [0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, -1, -1.5, -2, -3, -4, -6].
        scale: float8_e8m0fnu (or uint8) [O, I/32].
    Raises:
        ValueError on wrong dtypes or shapes, or on a scale byte of 255 (NaN in ue8m0).
    """
    if packed.dim() != 2 or packed.dtype not in (torch.int8, torch.uint8):
        raise ValueError(
            f"dequantize_fp4_weight: packed must be a 2-D int8 tensor [O, I/2], got "
            f"{packed.dtype} of shape {tuple(packed.shape)}"
        )
    num_rows, num_cols = packed.shape[0], packed.shape[1] * 2
    if num_cols % WEIGHT_FP4_BLOCK != 0:
        raise ValueError(
            f"dequantize_fp4_weight: I = {num_cols} (2 × packed columns) must be a multiple of "
            f"{WEIGHT_FP4_BLOCK}"
        )
    expected = (num_rows, num_cols // WEIGHT_FP4_BLOCK)
    scale_exp = _checkpoint_scale_bytes(scale, expected, "dequantize_fp4_weight")
    codes = unpack_nibbles(packed)
    return quant.dequant_fp4_ue8m0(codes, scale_exp, WEIGHT_FP4_BLOCK, dtype=torch.float32)


def quantize_fp8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Engram table rows: Q8_32 per row over each 32 columns (not 32×32 tiles).

    Args:
        w: float tensor [R, C], C a multiple of 32.
    Returns:
        codes: float8_e4m3fn [R, C].
        scale: float8_e8m0fnu [R, C/32]; S[r, j] scales columns 32j..32j+31 of row r.
    """
    _check_matrix(w, "quantize_fp8_rows")
    codes, scale_exp = quant.quant_fp8_ue8m0(w, ROWS_FP8_BLOCK)
    return codes, scale_exp.view(torch.float8_e8m0fnu)


def dequantize_fp8_rows(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Engram rows -> fp32 [R, C]: ``W[r, c] = code[r, c] * 2^(S[r, c//32] - 127)``.

    Args:
        codes: float8_e4m3fn [R, C], C a multiple of 32.
        scale: float8_e8m0fnu (or uint8) [R, C/32].
    Raises:
        ValueError on wrong dtypes or shapes, or on a scale byte of 255 (NaN in ue8m0).
    """
    _check_matrix(codes, "dequantize_fp8_rows", torch.float8_e4m3fn)
    if codes.shape[1] % ROWS_FP8_BLOCK != 0:
        raise ValueError(
            f"dequantize_fp8_rows: C = {codes.shape[1]} must be a multiple of {ROWS_FP8_BLOCK}"
        )
    expected = (codes.shape[0], codes.shape[1] // ROWS_FP8_BLOCK)
    scale_exp = _checkpoint_scale_bytes(scale, expected, "dequantize_fp8_rows")
    return quant.dequant_fp8_ue8m0(codes, scale_exp, ROWS_FP8_BLOCK, dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------


def _check_head_dim(head_dim: int, block: int, what: str) -> None:
    if head_dim <= 0 or head_dim % block != 0:
        raise ValueError(f"{what}: head_dim {head_dim} must be a positive multiple of {block}")


def _check_record(rec: torch.Tensor, record_bytes: int, what: str) -> None:
    if rec.dtype != torch.uint8 or rec.dim() == 0 or rec.shape[-1] != record_bytes:
        raise ValueError(
            f"{what}: expected uint8 records [..., {record_bytes}], got {rec.dtype} of shape "
            f"{tuple(rec.shape)}"
        )


def _check_matrix(w: torch.Tensor, what: str, dtype: torch.dtype | None = None) -> None:
    if w.dim() != 2 or (dtype is not None and w.dtype != dtype):
        wanted = f"a 2-D {dtype} tensor" if dtype is not None else "a 2-D tensor"
        raise ValueError(f"{what}: expected {wanted}, got {w.dtype} of shape {tuple(w.shape)}")


def _as_ue8m0_bytes(scale: torch.Tensor, what: str) -> torch.Tensor:
    """float8_e8m0fnu or uint8 -> uint8 bytes (same storage)."""
    if scale.dtype == torch.float8_e8m0fnu:
        return scale.view(torch.uint8)
    if scale.dtype != torch.uint8:
        raise ValueError(f"{what}: ue8m0 scales must be float8_e8m0fnu or uint8, got {scale.dtype}")
    return scale


def _checkpoint_scale_bytes(
    scale: torch.Tensor, expected_shape: tuple[int, int], what: str
) -> torch.Tensor:
    """Validate a checkpoint ue8m0 scale tensor and return its uint8 bytes."""
    scale_exp = _as_ue8m0_bytes(scale, what)
    if tuple(scale_exp.shape) != expected_shape:
        raise ValueError(
            f"{what}: scale shape {tuple(scale_exp.shape)} does not match the expected "
            f"{expected_shape}"
        )
    if bool((scale_exp == _UE8M0_NAN_BYTE).any()):
        raise ValueError(f"{what}: scale byte 255 is NaN in ue8m0; the checkpoint data is corrupt")
    return scale_exp
