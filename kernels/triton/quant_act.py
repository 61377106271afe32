"""Q8_32 activation quantization (model-spec §2.1, §4.3) and the shared in-kernel scale helpers.

Q8_32 over the last dim, per 32 contiguous channels:
    amax = max(max|x|, 1e-4);  s = pow2ceil(amax * f32(1/448));  code = e4m3(clamp(x / s, ±448))
The scale is returned as its ue8m0 byte ``log2(s) + 127`` (uint8). Because s is a power of two,
``x / s`` is formed as ``x * 2^(127 - e)``: exact, and identical to the reference's division.

Byte conventions shared by every kernel of this backend: e4m3 codes travel as uint8 tensors and are
bitcast in the kernel (``.to(tl.float8e4nv, bitcast=True)``); ue8m0 scales travel as uint8 and
decode as ``(e << 23)`` read as fp32, i.e. exactly 2^(e-127) for 1 <= e <= 254 (byte 0, 2^-127, and
byte 255, NaN, never come out of a Q8_32 quantizer and are rejected by the checkpoint loader).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2

FP8_BLOCK = 32
E4M3_MAX = 448.0
# Under the interpreter (TRITON_INTERPRET=1, set before triton is imported, as everywhere here)
# the fp32 -> e4m3 cast does not round to nearest: ``q8_32_groups`` rounds onto the e4m3 grid
# in integer / fp32 arithmetic first. Compiled for a GPU the cast is ``cvt.rn.satfinite`` — round
# to nearest even, the same bits — and the software rounding (~12 instructions a value) is left
# out (session 38: the slot-major SwiGLU's ~50 instructions a value, issue-bound in part).
INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")


@triton.jit
def ue8m0_to_f32(e):
    """ue8m0 bytes (any integer tensor) -> fp32 2^(e-127), exact for 1 <= e <= 254."""
    return (e.to(tl.int32) << 23).to(tl.float32, bitcast=True)


@triton.jit
def round_to_e4m3_grid(y):
    """fp32 values in [-448, 448] -> the nearest e4m3fn value (ties to even), still fp32.

    Done in integer/fp32 arithmetic so that the following ``.to(tl.float8e4nv)`` is exact: the
    interpreter's own fp32 -> e4m3 cast does not round to nearest, the GPU's (cvt.rn) does, and this
    keeps both bit-identical to torch. Normal range (|y| >= 2^-6): round the 23-bit mantissa to 3
    bits; subnormal range: round to a multiple of 2^-9 with the fp32 adder (RNE), keeping -0.
    """
    bits = y.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576  # mask 0xFFF00000
    normal = rounded.to(tl.float32, bitcast=True)
    sub = (y + 24576.0) - 24576.0  # 1.5 * 2^14: ulp 2^-9 on both sides of 0
    sub = tl.where(sub == 0.0, y * 0.0, sub)  # keep the sign of zero
    return tl.where(tl.abs(y) < 0.015625, sub, normal)


@triton.jit
def q8_32_groups(x, AXIS: tl.constexpr):
    """Q8_32 of a tile whose LAST axis (index AXIS) is one 32-channel block (shape [..., 32]).

    Returns (codes float8e4nv, same shape; ue8m0 exponents int32, shape [..., 1]).
    """
    amax = tl.maximum(tl.max(tl.abs(x), axis=AXIS, keep_dims=True), 1e-4)
    bits = (amax * (1.0 / 448.0)).to(tl.int32, bitcast=True)
    exponent = (bits >> 23) & 0xFF
    e = exponent + ((bits & 0x7FFFFF) != 0).to(tl.int32)  # pow2ceil: round the exponent up
    e = tl.where(exponent == 0xFF, 0xFF, e)  # inf/NaN amax -> NaN scale byte
    inv_scale = ((254 - e) << 23).to(tl.float32, bitcast=True)  # 2^(127 - e), exact
    y = tl.minimum(tl.maximum(x * inv_scale, -448.0), 448.0)
    if INTERPRETED:  # the interpreter's cast truncates; the GPU's rounds to nearest even
        y = round_to_e4m3_grid(y)
    return y.to(tl.float8e4nv), e


@triton.jit
def q8_32_values(codes, e):
    """``q8_32_groups``' codes and exponents -> the Q8_32 values code * 2^(e - 127) in fp32
    (exact), NaN where the scale byte is 0xFF (a non-finite block)."""
    v = codes.to(tl.float32) * ue8m0_to_f32(e)
    return tl.where(e == 0xFF, float("nan"), v)


@triton.jit
def _quant_q8_32_kernel(x_ptr, codes_ptr, scale_ptr, num_cols, stride_x_row,
                        BLOCK_GROUPS: tl.constexpr, FAKE: tl.constexpr):
    """One program quantizes BLOCK_GROUPS blocks of 32 channels of one row.

    FAKE=False stores e4m3 bytes to codes_ptr and ue8m0 bytes to scale_ptr; FAKE=True stores the
    dequantized values code * 2^(e-127) in codes_ptr's dtype (scale_ptr unused).
    """
    row = tl.program_id(0).to(tl.int64)
    first_group = tl.program_id(1) * BLOCK_GROUPS
    groups = first_group + tl.arange(0, BLOCK_GROUPS)  # [G]
    cols = groups[:, None] * 32 + tl.arange(0, 32)[None, :]  # [G, 32]
    num_groups = num_cols // 32
    mask = groups[:, None] < num_groups
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask, other=0.0).to(tl.float32)
    codes, e = q8_32_groups(x, 1)
    if FAKE:
        y = q8_32_values(codes, e)
        tl.store(codes_ptr + row * num_cols + cols, y.to(codes_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(codes_ptr + row * num_cols + cols, codes.to(tl.uint8, bitcast=True), mask=mask)
        e_row = tl.max(e, axis=1)  # [G, 1] -> [G]
        tl.store(scale_ptr + row * num_groups + groups, e_row.to(tl.uint8),
                 mask=groups < num_groups)


def quant_q8_32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q8_32 quantization of a 2-D activation.

    Args:
        x: (N, K) fp32/fp16/bf16, K a multiple of 32, unit stride in the last dim.
    Returns:
        codes: uint8 (N, K), the e4m3 byte of each element (view as torch.float8_e4m3fn).
        scale_exp: uint8 (N, K/32), the ue8m0 byte of each 32-channel block's scale.
    Bit-identical to ``reference.quant.quant_fp8_ue8m0(x, 32)`` (for finite x).
    """
    assert x.dim() == 2 and x.shape[1] % FP8_BLOCK == 0 and x.stride(1) == 1, \
        f"quant_q8_32: need (N, K) with K % 32 == 0 and unit column stride, got {tuple(x.shape)}"
    num_rows, num_cols = x.shape
    codes = torch.empty((num_rows, num_cols), dtype=torch.uint8, device=x.device)
    scale_exp = torch.empty((num_rows, num_cols // FP8_BLOCK), dtype=torch.uint8, device=x.device)
    if num_rows == 0:
        return codes, scale_exp
    _launch_q8_32(x, codes, scale_exp, fake=False)
    return codes, scale_exp


def _launch_q8_32(x: torch.Tensor, out: torch.Tensor, scale_exp: torch.Tensor, fake: bool) -> None:
    num_rows, num_cols = x.shape
    block_groups = min(32, next_power_of_2(num_cols // FP8_BLOCK))
    grid = (num_rows, cdiv(num_cols // FP8_BLOCK, block_groups))
    _quant_q8_32_kernel[grid](x, out, scale_exp, num_cols, x.stride(0),
                              BLOCK_GROUPS=block_groups, FAKE=fake,
                              num_warps=4 if block_groups > 8 else 1)


def fake_quant_fp8_block32(x: torch.Tensor) -> torch.Tensor:
    """Q8_32 quantize -> dequantize (registered op); same shape and dtype as x ([..., D])."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1]).contiguous()
    assert shape[-1] % FP8_BLOCK == 0, f"fake_quant_fp8_block32: last dim {shape[-1]} % 32 != 0"
    out = torch.empty_like(x2)
    if x2.shape[0] > 0:
        _launch_q8_32(x2, out, out, fake=True)
    return out.reshape(shape)


def is_cuda_sm90_plus(spec: dict) -> bool:
    """Shared supports() clause: a CUDA device of compute capability >= 9.0 (H100/H200).

    Spec keys read (all optional): ``device`` ("cuda"/"cpu"), ``capability`` ((major, minor)).
    """
    if spec.get("device", "cuda") != "cuda":
        return False
    capability = spec.get("capability")
    return capability is None or tuple(capability)[0] >= 9


def supports_q8_32(spec: dict) -> bool:
    """Any CUDA SM90+ device; the quantized dim (``dim``, optional) must be a multiple of 32."""
    return is_cuda_sm90_plus(spec) and spec.get("dim", FP8_BLOCK) % FP8_BLOCK == 0
