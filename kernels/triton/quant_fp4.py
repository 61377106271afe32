"""Q4E8_32 fake quantization (reference ``quant.fake_quant_fp4_ue8m0_block32``, model-spec §2.1):
the indexer's FP4 query, quantized and dequantized per 32 channels.

    amax = max(max|x|, 6*2^-126);  s = pow2ceil(amax * f32(1/6));  y = e2m1(clamp(x / s, ±6)) * s

Bit-exact to the reference: the scale is built from the fp32 bit pattern, ``x / s`` is formed as
``x * 2^(127 - e)`` (s is a power of two: exact), e2m1 rounding uses the reference's midpoints and
ties-to-even-code rule, ``code * s`` is exact in fp32 and the one cast to x's dtype rounds to
nearest. A block holding NaN or inf gets the NaN scale (ue8m0 255) and comes out all NaN, as in
the reference. The sign of zero follows x (negative values that round to 0 give -0.0).

The tensor is contiguous with D % 32 == 0, so it is a flat array of 32-channel blocks: program p
handles blocks [p * BG, (p + 1) * BG).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import quant_act
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2

BLOCK = 32
_AMAX_FLOOR = 6.0 * 2.0**-126


@triton.jit
def _round_to_e2m1_magnitude(m):
    """|y| in [0, 6] -> the nearest e2m1 magnitude, ties to the even code (reference midpoints:
    0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4)."""
    q = tl.where(m > 0.25, 0.5, 0.0)
    q = tl.where(m >= 0.75, 1.0, q)
    q = tl.where(m > 1.25, 1.5, q)
    q = tl.where(m >= 1.75, 2.0, q)
    q = tl.where(m > 2.5, 3.0, q)
    q = tl.where(m >= 3.5, 4.0, q)
    return tl.where(m > 5.0, 6.0, q)


@triton.jit
def _fake_quant_fp4_kernel(x_ptr, y_ptr, num_blocks, BG: tl.constexpr):
    blocks = tl.program_id(0).to(tl.int64) * BG + tl.arange(0, BG)
    offs = blocks[:, None] * 32 + tl.arange(0, 32)[None, :]  # [BG, 32]
    mask = blocks[:, None] < num_blocks
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=1, keep_dims=True), 6.0 * 2.0**-126)
    bits = (amax * (1.0 / 6.0)).to(tl.int32, bitcast=True)
    exponent = (bits >> 23) & 0xFF
    e = exponent + ((bits & 0x7FFFFF) != 0).to(tl.int32)  # pow2ceil: round the exponent up
    non_finite = tl.max((x != x).to(tl.int32) | (tl.abs(x) == float("inf")).to(tl.int32),
                        axis=1, keep_dims=True)
    e = tl.where((exponent == 0xFF) | (non_finite != 0), 0xFF, e)  # NaN scale byte
    inv_scale = ((254 - tl.minimum(e, 254)) << 23).to(tl.float32, bitcast=True)  # 2^(127 - e)
    y = tl.minimum(tl.maximum(x * inv_scale, -6.0), 6.0)
    magnitude = _round_to_e2m1_magnitude(tl.abs(y))
    # sign bit of x (and of x / s), -0.0 included; OR-ed in because tl's negation is 0 - m,
    # which turns -0.0 into +0.0
    sign = x.to(tl.int32, bitcast=True) & -2147483648  # 0x80000000
    signed = (magnitude.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    value = signed * quant_act.ue8m0_to_f32(e)  # exact
    value = tl.where(e == 0xFF, float("nan"), value)
    tl.store(y_ptr + offs, value.to(y_ptr.dtype.element_ty), mask=mask)


def launch_meta(num_blocks: int) -> dict[str, Any]:
    """BG = 64 blocks (2048 elements) per program, fewer for tiny inputs."""
    bg = min(64, next_power_of_2(max(num_blocks, 1)))
    return dict(BG=bg, num_warps=4 if bg >= 32 else 1)


def fake_quant_fp4_ue8m0_block32(x: torch.Tensor) -> torch.Tensor:
    """Registered op: Q4E8_32 quantize -> dequantize; same shape and dtype as x ([..., D],
    D % 32 == 0), bit-identical to the reference."""
    assert x.dim() >= 1 and x.shape[-1] % BLOCK == 0 and x.shape[-1] > 0, \
        f"fake_quant_fp4_ue8m0_block32: last dim of {tuple(x.shape)} must be a multiple of 32"
    flat = x.contiguous()
    out = torch.empty_like(flat)
    num_blocks = flat.numel() // BLOCK
    if num_blocks == 0:
        return out.view(x.shape)
    meta = launch_meta(num_blocks)
    _fake_quant_fp4_kernel[(cdiv(num_blocks, meta["BG"]),)](flat, out, num_blocks, **meta)
    return out.view(x.shape)


def supports_fake_quant_fp4(spec: dict) -> bool:
    """Any CUDA SM90+ device; the quantized dim (``dim``, optional) a multiple of 32."""
    return quant_act.is_cuda_sm90_plus(spec) and spec.get("dim", BLOCK) % BLOCK == 0


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate case: the indexer query (bf16), full-size programs."""
    meta = launch_meta(1 << 20)
    return [{"id": "fake_quant_fp4_bf16_bg64", "module": __name__,
             "kernel": "_fake_quant_fp4_kernel",
             "signature": {"x_ptr": "*bf16", "y_ptr": "*bf16", "num_blocks": "i32"},
             "constexprs": {"BG": meta["BG"]}, "num_warps": meta["num_warps"], "num_stages": 1,
             "no_spill": True}]
