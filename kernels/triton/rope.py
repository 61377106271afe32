"""Interleaved-pair RoPE on the trailing channels (reference ``rope.apply_rope``, model-spec §2.1).

x (N, ..., Dx) is viewed as (N, H, Dx) (H = product of the middle dims); program (n, h-block)
copies the leading Dx - R channels of BH vectors unchanged and rotates the pairs (2k, 2k+1) of
the last R = 2 * len(inv_freq) channels by ``float32(positions[n]) * inv_freq[k]`` (negated when
``inverse``), in fp32, then casts once to x's dtype, as the reference does.

Same fp32 math as the reference: ``tl.cos``/``tl.sin`` lower to libdevice's full-range
``cosf``/``sinf`` on NVIDIA (no ``cos.approx`` in the PTX, which would be useless at angles of 1e5
rad; the 32-B local stack of the compiled kernel is their Payne-Hanek reduction table, not a
register spill), and the kernel is compiled without FMA contraction (``enable_fp_fusion=False``)
so that ``a*cos - b*sin`` rounds each product as torch's separate multiplies do. Under the
interpreter they are numpy's cos/sin, within 1 ulp of torch's CPU ones.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import quant_act
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2


@triton.jit
def _rope_kernel(
    x_ptr, pos_ptr, freq_ptr, y_ptr,  # x, y (N, H, Dx) any float; pos int (N,); freq fp32 (R/2,)
    H, D_PASS,  # vectors per row; leading channels copied unchanged (Dx - R)
    stride_xn, stride_xh, stride_yn, stride_yh,
    HALF: tl.constexpr,  # R / 2 rotated pairs
    HALF_P: tl.constexpr,  # next power of two >= HALF
    BH: tl.constexpr, BLOCK_C: tl.constexpr,
    INVERSE: tl.constexpr,
    COPY: tl.constexpr,  # False: y is x (in place), the pass-through channels stay
):
    row = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BH + tl.arange(0, BH)
    mask_h = heads < H
    x_row = x_ptr + row * stride_xn + heads.to(tl.int64)[:, None] * stride_xh  # [BH, 1]
    y_row = y_ptr + row * stride_yn + heads.to(tl.int64)[:, None] * stride_yh

    cols = tl.arange(0, BLOCK_C)
    if COPY:
        for c0 in range(0, D_PASS, BLOCK_C):  # pass-through channels: a bit-exact copy
            mask = mask_h[:, None] & (c0 + cols < D_PASS)[None, :]
            tl.store(y_row + c0 + cols[None, :],
                     tl.load(x_row + c0 + cols[None, :], mask=mask), mask=mask)

    pairs = tl.arange(0, HALF_P)
    freq = tl.load(freq_ptr + pairs, mask=pairs < HALF, other=0.0)
    angle = tl.load(pos_ptr + row).to(tl.float32) * freq  # [HALF_P]
    if INVERSE:
        angle = angle * -1.0  # not -angle (0 - angle): keeps torch's -0.0 for position 0
    cos, sin = tl.cos(angle), tl.sin(angle)

    tail = tl.arange(0, 2 * HALF_P)  # interleaved (a, b) pairs, read and written contiguously
    mask = mask_h[:, None] & (tail < 2 * HALF)[None, :]
    v = tl.load(x_row + D_PASS + tail[None, :], mask=mask, other=0.0).to(tl.float32)
    a, b = tl.split(tl.reshape(v, (BH, HALF_P, 2)))
    rot_a = a * cos[None, :] - b * sin[None, :]
    rot_b = a * sin[None, :] + b * cos[None, :]
    out = tl.reshape(tl.join(rot_a, rot_b), (BH, 2 * HALF_P))
    tl.store(y_row + D_PASS + tail[None, :], out.to(y_ptr.dtype.element_ty), mask=mask)


def launch_meta(num_vectors: int, pass_dim: int, half: int, inverse: bool,
                copy: bool = True) -> dict[str, Any]:
    """Constexprs + launch options for H vectors per row of pass_dim copied channels and
    ``half`` rotated pairs: BH covers up to 8 vectors (8 programs per row of a 64-head q), one
    warp each: on the H200, (4096, 64, 512) bf16 took 162 us (3.3 TB/s) against 220 us with
    BH=16 and 4 warps (BH=16 with one warp spills registers)."""
    return dict(HALF=half, HALF_P=next_power_of_2(half),
                BH=min(8, next_power_of_2(max(num_vectors, 1))),
                BLOCK_C=min(512, next_power_of_2(max(pass_dim, 1))),
                INVERSE=inverse, COPY=copy, num_warps=1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor,
               inverse: bool = False, in_place: bool = False) -> torch.Tensor:
    """Registered op: rotate the last ``2 * len(inv_freq)`` channels of every vector of row n by
    ``positions[n] * inv_freq`` (``inverse``: the negative angle); x (N, ..., Dx) any float dtype,
    positions (N,) int, inv_freq (R/2,) fp32. Returns a new (N, ..., Dx) tensor in x's dtype, or
    (``in_place``) x itself with its last channels rotated: only those are read and written (1/8
    of q's bytes at the slice's 512 / 64)."""
    half = inv_freq.numel()
    dim = x.shape[-1]
    assert x.dim() >= 2 and 0 < 2 * half <= dim, \
        f"apply_rope: x {tuple(x.shape)} cannot hold {2 * half} rope channels"
    x3 = x.reshape(x.shape[0], -1, dim)
    if in_place and (x3.stride(-1) != 1 or x3.data_ptr() != x.data_ptr()):
        # reshape copied (x does not view its rows as (N, H, D)): rotate a copy, write it back
        return x.copy_(apply_rope(x, positions, inv_freq, inverse))
    if x3.stride(-1) != 1:
        x3 = x3.contiguous()
    y = x3 if in_place else torch.empty(x3.shape, dtype=x.dtype, device=x.device)
    num_rows, num_vectors = x3.shape[0], x3.shape[1]
    if num_rows == 0 or num_vectors == 0:
        return y.view(x.shape)
    meta = launch_meta(num_vectors, dim - 2 * half, half, inverse, copy=not in_place)
    grid = (num_rows, cdiv(num_vectors, meta["BH"]))
    _rope_kernel[grid](x3, positions.contiguous(), inv_freq.to(torch.float32).contiguous(), y,
                       num_vectors, dim - 2 * half, x3.stride(0), x3.stride(1), y.stride(0),
                       y.stride(1), enable_fp_fusion=False, **meta)
    return x if in_place else y.view(x.shape)


def supports_rope(spec: dict) -> bool:
    """Any CUDA SM90+ device; any rope dim and x dtype."""
    return quant_act.is_cuda_sm90_plus(spec)


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases: q/output rope on (N, 64, 512) with rope dim 64 (forward and
    inverse, copying and in place), bf16, and the single-vector (N, 512) KV form."""
    cases = []
    for name, heads, inverse, copy in (("rope_q_h64_d512_r64", 64, False, True),
                                       ("rope_out_inverse_h64_d512_r64", 64, True, True),
                                       ("rope_q_in_place_h64_d512_r64", 64, False, False),
                                       ("rope_kv_d512_r64", 1, False, True)):
        meta = launch_meta(heads, 448, 32, inverse, copy)
        cases.append({
            "id": name, "module": __name__, "kernel": "_rope_kernel",
            "signature": {"x_ptr": "*bf16", "pos_ptr": "*i64", "freq_ptr": "*fp32",
                          "y_ptr": "*bf16", "H": "i32", "D_PASS": "i32", "stride_xn": "i32",
                          "stride_xh": "i32", "stride_yn": "i32", "stride_yh": "i32"},
            "constexprs": {k: v for k, v in meta.items() if k != "num_warps"},
            "num_warps": meta["num_warps"], "num_stages": 1, "max_stack": 32,
            "divisible": ["D_PASS"]})
    return cases
