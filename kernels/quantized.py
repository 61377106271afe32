"""Quantized checkpoint weights as the ops take them: codes + scales, kept as stored (§4.3).

One type per stored format, shared by the reference and the Triton backends (no triton import):

    Fp8BlockWeight       codes float8_e4m3fn [O, I]       scale ue8m0 [ceil(O/32), ceil(I/32)]
    Mxfp4ExpertWeights   packed uint8/int8 [E, O, I/2]    scale ue8m0 [E, O, I/32]
                         (checkpoint byte order, or ``word_order``: mxfp4_word_order.py)
    Fp8Rows              codes float8_e4m3fn [R, C]       scale ue8m0 [R, C/32]

Scales are ``float8_e8m0fnu`` or their uint8 bytes (``Fp8BlockWeight`` also takes float32
powers of two); layouts are those of ``formats.quantize_fp8_weight`` / ``quantize_fp4_weight`` /
``quantize_fp8_rows``, i.e. the checkpoint's (routed experts stacked along E, one checkpoint
tensor per expert). ``dequantize()`` is exact and gives the bits ``runtime/weights/dequant.py``
gives (fp32 products of a code and a power of two, cast to bf16). It checks shapes only: a NaN
scale byte (255) is the loader's to reject, so no call here synchronizes with the device.
Containers are frozen and cheap to build (``StoredWeight.weight`` builds one per held tensors).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from deepinfer.kernels.mxfp4_w4a8_order import from_w4a8_order
from deepinfer.kernels.mxfp4_word_order import from_word_order
from deepinfer.kernels.reference import quant

WEIGHT_DTYPE = torch.bfloat16
"""dtype of every dequantized weight (the values are exact in bf16)."""
FP8_TILE = 32
FP4_BLOCK = 32
ROWS_BLOCK = 32
_UE8M0_DTYPES = (torch.float8_e8m0fnu, torch.uint8)


def _scale_bytes(scale: torch.Tensor) -> torch.Tensor:
    """ue8m0 scales (float8_e8m0fnu or uint8) -> their uint8 bytes (same storage)."""
    return scale.view(torch.uint8) if scale.dtype == torch.float8_e8m0fnu else scale


def _require(ok: bool, what: str, message: str) -> None:
    if not ok:
        raise ValueError(f"{what}: {message}")


@dataclass(frozen=True)
class _Fp8CodesAndScales:
    """What the two FP8 containers share: e4m3 ``codes`` (the logical shape) and ue8m0 ``scale``."""

    codes: torch.Tensor
    scale: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    @property
    def device(self) -> torch.device:
        return self.codes.device

    @property
    def nbytes(self) -> int:
        """Resident bytes: codes + scales."""
        return self.codes.nbytes + self.scale.nbytes

    def to(self, device: torch.device | str):
        return type(self)(self.codes.to(device), self.scale.to(device))


@dataclass(frozen=True)
class Fp8BlockWeight(_Fp8CodesAndScales):
    """A dense FP8 weight with one power-of-two scale per 32×32 tile.

    codes: float8_e4m3fn [O, I]; scale: float8_e8m0fnu / uint8 (ue8m0 bytes) or float32 (powers
    of two) [ceil(O/32), ceil(I/32)]; tile (i, j) covers rows 32i.. and columns 32j.. .
    bf16: None, or the weight's bf16 twin [O, I] — ``dequantize()``'s values, held resident
    where the plan has room for it (``cache.prefill_bf16_weights``): prefill-sized GEMMs read
    it with both operands in shared memory (``kernels/triton/linear_ss.py``), the same bits.
    """

    bf16: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> Fp8BlockWeight:
        return Fp8BlockWeight(self.codes.to(device), self.scale.to(device),
                              None if self.bf16 is None else self.bf16.to(device))

    @property
    def nbytes(self) -> int:
        """Resident bytes: codes + scales (+ the bf16 twin)."""
        return super().nbytes + (0 if self.bf16 is None else self.bf16.nbytes)

    def __post_init__(self) -> None:
        what = "Fp8BlockWeight"
        _require(self.codes.dim() == 2 and self.codes.dtype == torch.float8_e4m3fn, what,
                 f"codes must be float8_e4m3fn [O, I], got {self.codes.dtype} "
                 f"{tuple(self.codes.shape)}")
        rows, cols = self.codes.shape
        tiles = (-(-rows // FP8_TILE), -(-cols // FP8_TILE))
        _require(tuple(self.scale.shape) == tiles, what,
                 f"scale shape {tuple(self.scale.shape)}, expected {tiles} for codes "
                 f"{(rows, cols)}")
        _require(self.scale.dtype in (*_UE8M0_DTYPES, torch.float32), what,
                 f"scale must be float8_e8m0fnu, uint8 or float32, got {self.scale.dtype}")
        _require(self.bf16 is None or (self.bf16.dtype == torch.bfloat16
                                       and self.bf16.shape == self.codes.shape), what,
                 f"bf16 twin must be bfloat16 {tuple(self.codes.shape)}, got "
                 f"{None if self.bf16 is None else (self.bf16.dtype, tuple(self.bf16.shape))}")

    def scale_f32(self) -> torch.Tensor:
        """float32 [ceil(O/32), ceil(I/32)] tile scales."""
        if self.scale.dtype == torch.float32:
            return self.scale
        return quant.ue8m0_decode(_scale_bytes(self.scale))

    def dequantize(self) -> torch.Tensor:
        """bf16 [O, I]: ``code[r, c] * scale[r // 32, c // 32]`` (exact)."""
        rows, cols = self.codes.shape
        per_elem = self.scale_f32().repeat_interleave(FP8_TILE, 0)[:rows]
        per_elem = per_elem.repeat_interleave(FP8_TILE, 1)[:, :cols]
        return (self.codes.to(torch.float32) * per_elem).to(WEIGHT_DTYPE)


@dataclass(frozen=True)
class Mxfp4ExpertWeights:
    """One projection (w1, w2 or w3) of E routed experts in MXFP4.

    packed: uint8 (or the checkpoint's int8) [E, O, I/2], byte k of a row holding column 2k in
    its low nibble and 2k+1 in its high nibble (e2m1: bit 3 sign, bits 0..2 index into
    0, .5, 1, 1.5, 2, 3, 4, 6); scale: float8_e8m0fnu / uint8 [E, O, I/32], one per row per 32
    input columns. Expert e is checkpoint tensor ``experts.{e}.wN.weight`` / ``.scale``.
    scale_max: the largest scale byte where the owner of the stacks tracks it (None: unknown);
    kernels may take a cheaper path when it is known to be small (moe_experts' W_ONE_MUL).
    word_order: ``packed`` holds the bytes in ``mxfp4_word_order``'s word order (each 32-bit
    word's bits permuted for the Triton expert kernels' cheaper unpack) instead of the layout
    above; ``dequantize`` (hence ``dense`` and the reference ops) converts back, exactly.
    w4a8_order: ``packed`` holds the bytes in ``mxfp4_w4a8_order``'s layout (the W4A8 expert
    kernels'), converted back the same way; at most one of the two orders.
    """

    packed: torch.Tensor
    scale: torch.Tensor
    scale_max: int | None = None
    word_order: bool = False
    w4a8_order: bool = False

    def __post_init__(self) -> None:
        what = "Mxfp4ExpertWeights"
        _require(self.packed.dim() == 3 and self.packed.dtype in (torch.uint8, torch.int8), what,
                 f"packed must be uint8/int8 [E, O, I/2], got {self.packed.dtype} "
                 f"{tuple(self.packed.shape)}")
        e, rows, half = self.packed.shape
        _require((2 * half) % FP4_BLOCK == 0, what,
                 f"I = {2 * half} must be a multiple of {FP4_BLOCK}")
        expected = (e, rows, 2 * half // FP4_BLOCK)
        _require(tuple(self.scale.shape) == expected and self.scale.dtype in _UE8M0_DTYPES, what,
                 f"scale must be ue8m0 {expected}, got {self.scale.dtype} "
                 f"{tuple(self.scale.shape)}")
        _require(not (self.word_order and self.w4a8_order), what,
                 "word_order and w4a8_order are two different byte orders: at most one")

    @property
    def shape(self) -> tuple[int, int, int]:
        """Logical (E, O, I)."""
        e, rows, half = self.packed.shape
        return (e, rows, 2 * half)

    @property
    def num_experts(self) -> int:
        return self.packed.shape[0]

    @property
    def out_features(self) -> int:
        return self.packed.shape[1]

    @property
    def in_features(self) -> int:
        return 2 * self.packed.shape[2]

    @property
    def device(self) -> torch.device:
        return self.packed.device

    @property
    def nbytes(self) -> int:
        """Resident bytes: packed codes + scales."""
        return self.packed.nbytes + self.scale.nbytes

    def to(self, device: torch.device | str) -> Mxfp4ExpertWeights:
        return dataclasses.replace(self, packed=self.packed.to(device),
                                   scale=self.scale.to(device))

    def select(self, experts: int | slice | torch.Tensor) -> Mxfp4ExpertWeights:
        """The experts ``experts`` (an int keeps the E axis: a 1-expert container; an int or a
        slice gives views, an index tensor a copy of only those experts)."""
        if isinstance(experts, int):
            experts = slice(experts, experts + 1)
        return dataclasses.replace(self, packed=self.packed[experts], scale=self.scale[experts])

    def checkpoint_packed(self) -> torch.Tensor:
        """``packed`` in checkpoint order (itself, or a converted copy in word or W4A8 order)."""
        if self.w4a8_order:
            return from_w4a8_order(self.packed)
        return from_word_order(self.packed) if self.word_order else self.packed

    def dequantize(self) -> torch.Tensor:
        """bf16 [E, O, I]: ``e2m1(nibble) * 2^(scale - 127)`` (exact, in either byte order)."""
        packed = self.checkpoint_packed()
        packed = packed.view(torch.uint8) if packed.dtype == torch.int8 else packed
        nibbles = torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2)  # [E, O, I]
        return quant.dequant_fp4_ue8m0(nibbles, _scale_bytes(self.scale), FP4_BLOCK,
                                       dtype=torch.float32).to(WEIGHT_DTYPE)


def stacked_rows(top: Fp8BlockWeight, bottom: Fp8BlockWeight) -> Fp8BlockWeight | None:
    """``top`` and ``bottom`` (O, I) as one (2 O, I) weight (top's rows, then bottom's) without
    a copy, when bottom's codes and scales directly follow top's in one storage (each
    contiguous; O a multiple of the 32-row scale tile); else None. Their bf16 twins likewise
    (``Expert.pack_gate_up``), else the stacked weight has none."""
    def follows(a: torch.Tensor, b: torch.Tensor) -> bool:
        return (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
                and a.is_contiguous() and b.is_contiguous()
                and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
                and b.storage_offset() == a.storage_offset() + a.numel())

    def stack(a: torch.Tensor) -> torch.Tensor:
        return a.as_strided((2 * a.shape[0], a.shape[1]), a.stride())

    # the answer is kept on ``top`` (the held containers live as long as their tensors:
    # ``StoredWeight.weight``), for this bottom's storage: a prefill asks once a layer, and
    # the same stacked object keeps its TMA descriptors (``host_cache``)
    key = (id(bottom), bottom.codes.data_ptr(), bottom.codes.shape, bottom.scale.data_ptr(),
           None if bottom.bf16 is None else bottom.bf16.data_ptr())
    memo = top.__dict__.get("_stacked")
    if memo is not None and memo[0] == key:
        return memo[1]
    codes, scale, twin = top.codes, top.scale, top.bf16
    out = None
    if not codes.shape[0] % FP8_TILE and follows(codes, bottom.codes) and follows(scale,
                                                                                 bottom.scale):
        # the bf16 twins stack the same way, or the stacked weight has none
        twins = twin is not None and bottom.bf16 is not None and follows(twin, bottom.bf16)
        out = Fp8BlockWeight(stack(codes), stack(scale), stack(twin) if twins else None)
    object.__setattr__(top, "_stacked", (key, out))  # frozen: fields only
    return out


@dataclass(frozen=True)
class Fp8Rows(_Fp8CodesAndScales):
    """An engram table kept as stored: codes float8_e4m3fn [R, C], scale ue8m0 [R, C/32]
    (one per row per 32 columns). ``table[ids]`` gathers rows, then dequantizes only those."""

    def __post_init__(self) -> None:
        what = "Fp8Rows"
        _require(self.codes.dim() == 2 and self.codes.dtype == torch.float8_e4m3fn
                 and self.codes.shape[1] % ROWS_BLOCK == 0, what,
                 f"codes must be float8_e4m3fn [R, C] with C % {ROWS_BLOCK} == 0, got "
                 f"{self.codes.dtype} {tuple(self.codes.shape)}")
        expected = (self.codes.shape[0], self.codes.shape[1] // ROWS_BLOCK)
        _require(tuple(self.scale.shape) == expected and self.scale.dtype in _UE8M0_DTYPES, what,
                 f"scale must be ue8m0 {expected}, got {self.scale.dtype} "
                 f"{tuple(self.scale.shape)}")

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (int64, any shape) -> bf16 [*ids.shape, C] (exact)."""
        codes = self.codes.view(torch.uint8)[ids].view(torch.float8_e4m3fn)  # gather as bytes
        scale = _scale_bytes(self.scale)[ids]
        return quant.dequant_fp8_ue8m0(codes, scale, ROWS_BLOCK,
                                       dtype=torch.float32).to(WEIGHT_DTYPE)

    def dequantize(self) -> torch.Tensor:
        """bf16 [R, C] (exact)."""
        return quant.dequant_fp8_ue8m0(self.codes, _scale_bytes(self.scale), ROWS_BLOCK,
                                       dtype=torch.float32).to(WEIGHT_DTYPE)


QuantizedWeight = Fp8BlockWeight | Mxfp4ExpertWeights | Fp8Rows


def dense(weight: torch.Tensor | Fp8BlockWeight | Mxfp4ExpertWeights) -> torch.Tensor:
    """The plain matrix of a weight: a tensor as is, a container dequantized (bf16, exact).

    A 1-expert ``Mxfp4ExpertWeights`` gives its [O, I] matrix (the form ``expert_ffn`` takes).
    """
    if isinstance(weight, Fp8BlockWeight):
        return weight.dequantize()
    if isinstance(weight, Mxfp4ExpertWeights):
        if weight.num_experts != 1:
            raise ValueError(f"dense: a matrix needs a 1-expert Mxfp4ExpertWeights, got "
                             f"{weight.num_experts} experts")
        return weight.dequantize()[0]
    return weight
