"""The expert weights as the routed-expert kernels take them (``moe_experts``), and their
lossless load-time re-encodings: MXFP4 -> FP8 e4m3 codes, MXFP4 -> word order
(``kernels/mxfp4_word_order.py``, unpacked by ``mxfp4_words``), a dense 32x32-tile FP8 weight as
a 1-expert stack."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from deepinfer.kernels import mxfp4_w4a8_order, mxfp4_word_order

# e4m3fn byte of each e2m1 nibble (0, .5, 1, 1.5, 2, 3, 4, 6, then the negatives; code 8 = -0)
_E2M1_TO_E4M3_BYTES = (0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C,
                       0x80, 0xB0, 0xB8, 0xBC, 0xC0, 0xC4, 0xC8, 0xCC)

@dataclass(frozen=True)
class ExpertWeights:
    """One projection of E experts, kept quantized. See the module docstring for the layouts."""

    data: torch.Tensor
    scale: torch.Tensor
    fmt: str  # "mxfp4" | "fp8"
    scale_rows: int = 1  # rows per ue8m0 scale: 1 (per row), 32 (dense 32×32 tiles)
    scale_max: int | None = None  # the largest scale byte if known (W_ONE_MUL=2 when <= 128)
    word_order: bool = False  # MXFP4 bytes in ``mxfp4_words``' word order (SPLIT_K tiles only)
    w4a8_order: bool = False  # MXFP4 bytes in ``moe_gluon_w4a8``'s kernel order (folded tiles)

    @property
    def num_experts(self) -> int:
        return self.data.shape[0]

    @property
    def out_features(self) -> int:
        return self.data.shape[1]

    @property
    def in_features(self) -> int:
        return self.data.shape[2] * (2 if self.fmt == "mxfp4" else 1)


def pack_mxfp4_experts(w: torch.Tensor) -> ExpertWeights:
    """(E, O, I) float -> MXFP4 ExpertWeights (formats.quantize_fp4_weight per expert)."""
    from deepinfer.kernels.formats import quantize_fp4_weight

    pairs = [quantize_fp4_weight(w[e].cpu()) for e in range(w.shape[0])]
    return ExpertWeights(torch.stack([p for p, _ in pairs]).to(w.device),
                         torch.stack([s for _, s in pairs]).view(torch.uint8).to(w.device), "mxfp4")


def mxfp4_to_fp8(w: ExpertWeights) -> ExpertWeights:
    """Lossless load-time re-encoding MXFP4 -> e4m3 codes with the same per-row ue8m0 scales.

    Every e2m1 value (0, ±.5 … ±6) is an e4m3 value, so code × 2^(e-127) is unchanged bit for bit.
    Word-order bytes are read back in checkpoint order first.
    """
    assert w.fmt == "mxfp4" and not w.w4a8_order, "mxfp4_to_fp8: checkpoint or word order"
    lut = torch.tensor(_E2M1_TO_E4M3_BYTES, dtype=torch.uint8, device=w.data.device)
    packed = w.data.view(torch.uint8)
    if w.word_order:
        packed = mxfp4_word_order.from_word_order(packed)
    codes = torch.empty((*packed.shape[:-1], packed.shape[-1] * 2), dtype=torch.uint8,
                        device=packed.device)
    for e in range(packed.shape[0]):  # one expert at a time: int64 indices stay small
        codes[e, :, 0::2] = lut[(packed[e] & 0xF).long()]  # column 2k: low nibble
        codes[e, :, 1::2] = lut[(packed[e] >> 4).long()]
    return ExpertWeights(codes.view(torch.float8_e4m3fn), w.scale, "fp8", 1)


def mxfp4_to_word_order(w: ExpertWeights) -> ExpertWeights:
    """Lossless load-time re-arrangement of MXFP4 weights into word order (``mxfp4_words``:
    ~11 instead of ~16 instructions per 8 weights before the scale multiplies)."""
    assert w.fmt == "mxfp4" and not w.word_order
    return dataclasses.replace(w, data=mxfp4_word_order.to_word_order(w.data),
                               word_order=True)


def fp8_block_experts(codes: torch.Tensor, scale: torch.Tensor) -> ExpertWeights:
    """One dense FP8 weight (O, I) with 32×32 tile scales as a 1-expert ExpertWeights."""
    return ExpertWeights(codes[None], scale.view(torch.uint8)[None], "fp8", 32)


def mxfp4_to_w4a8_order(w: ExpertWeights) -> ExpertWeights:
    """Checkpoint-order MXFP4 ExpertWeights -> the same in ``moe_gluon_w4a8``'s kernel order
    (``mxfp4_w4a8_order.to_w4a8_order``: one Triton launch on a GPU)."""
    assert w.fmt == "mxfp4" and not w.word_order and not w.w4a8_order
    data = mxfp4_w4a8_order.to_w4a8_order(w.data.view(torch.uint8))
    return ExpertWeights(data.view(w.data.dtype), w.scale, "mxfp4", w.scale_rows, w.scale_max,
                         w4a8_order=True)
