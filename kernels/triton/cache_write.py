"""Fused cache writes: [RMSNorm] + RoPE + block quantization + record packing, one row per program.

Three record formats (model-spec §3.1, ``kernels/formats.py``), picked by the constexpr ``FMT``:

    FMT_WINDOW      kv-norm + RoPE + Q8_32   -> 528-B window record (D e4m3 | D/32 ue8m0)
    FMT_COMPRESSED  RoPE + Q4E4_16           -> 288-B compressed record (D/2 e2m1 | D/16 e4m3)
    FMT_INDEX_KEY   k-norm + RoPE + Q4E8_32  -> 68-B index-key record (D/2 e2m1 | D/32 ue8m0)

A row is held as its even and odd channel halves (channel 2j and 2j+1): RoPE pairs are exactly
(even j, odd j), and an FP4 byte is exactly (even j | odd j << 4), so no shuffles are needed.
As in the model, the normed row and the rotated row are rounded to the input dtype before the
quantizer sees them. Scales are computed from the fp32 bit patterns; e4m3 and e2m1 rounding is
done with integer RNE (bit-exact with torch, and independent of the interpreter's fp8 cast,
which mis-rounds across binades).

The window variant can also scatter straight into the ring (``ring[pos % W]``, only the last W
rows of the call, like ``runtime/model/attention.py``).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels import formats
from deepinfer.kernels.triton import attn_common
from deepinfer.kernels.triton.attn_common import cuda_sm90

FMT_WINDOW = 1
FMT_COMPRESSED = 2
FMT_INDEX_KEY = 3

NUM_WARPS = 4


@triton.jit
def _e4m3_code(x):
    """fp32 already clamped to [-448, 448] -> e4m3fn byte (int32), round-to-nearest-even."""
    bits = x.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = tl.abs(x)
    # Subnormal range (< 2^-6): the code is rne(a * 2^9) (8 is the smallest normal, 2^-6).
    sub = ((a * 512.0 + 8388608.0) - 8388608.0).to(tl.int32)
    ab = a.to(tl.int32, bitcast=True)
    keep = ab >> 20
    rem = ab & 0xFFFFF
    up = (rem > 0x80000) | ((rem == 0x80000) & ((keep & 1) == 1))
    normal = keep + up.to(tl.int32) - 960  # ((E + 127) << 3 | m) - (120 << 3)
    code = tl.where(a < 0.015625, sub, normal)
    return code | sign


@triton.jit
def _e2m1_code(v):
    """fp32 already clamped to [-6, 6] -> e2m1 nibble (int32): ties to the even code, sign bit
    copied (so -0.0 gives 8), as ``reference.quant.e2m1_encode``."""
    a = tl.abs(v)
    c = (a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
    c += (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32)
    c += (a > 5.0).to(tl.int32)
    return c | ((v.to(tl.int32, bitcast=True) >> 28) & 8)


@triton.jit
def _pow2ceil_exp(t):
    """Biased exponent of pow2ceil(t) for normal fp32 t > 0 (the ue8m0 byte), int32."""
    b = t.to(tl.int32, bitcast=True)
    return ((b >> 23) & 0xFF) + ((b & 0x7FFFFF) != 0).to(tl.int32)


@triton.jit
def _norm_rope_quant_kernel(
    x_ptr, stride_x, w_ptr, pos_ptr, freq_ptr, out_ptr, stride_out,
    num_rows, ring_size, eps,
    D: tl.constexpr, R: tl.constexpr, FMT: tl.constexpr, HAS_NORM: tl.constexpr,
    RING: tl.constexpr,
):
    n = tl.program_id(0)
    if RING:
        if n < num_rows - ring_size:
            return  # overwritten later in this same call
    j = tl.arange(0, D // 2)
    row = x_ptr + n.to(tl.int64) * stride_x
    xe_raw = tl.load(row + 2 * j)
    xe = xe_raw.to(tl.float32)
    xo = tl.load(row + 2 * j + 1).to(tl.float32)
    if HAS_NORM:
        ms = (tl.sum(xe * xe, axis=0) + tl.sum(xo * xo, axis=0)) / D
        r = tl.math.div_rn(1.0, tl.sqrt_rn(ms + eps))
        xe = (tl.load(w_ptr + 2 * j).to(tl.float32) * (xe * r)).to(xe_raw.dtype).to(tl.float32)
        xo = (tl.load(w_ptr + 2 * j + 1).to(tl.float32) * (xo * r)).to(xe_raw.dtype)
        xo = xo.to(tl.float32)
    # RoPE on the last R channels = pairs j >= (D - R) / 2.
    pos = tl.load(pos_ptr + n).to(tl.float32)
    is_rope = j >= (D - R) // 2
    f = tl.load(freq_ptr + (j - (D - R) // 2), mask=is_rope, other=0.0)
    ang = pos * f
    c = tl.cos(ang)
    s = tl.sin(ang)
    re = (xe * c - xo * s).to(xe_raw.dtype).to(tl.float32)
    ro = (xe * s + xo * c).to(xe_raw.dtype).to(tl.float32)
    xe = tl.where(is_rope, re, xe)
    xo = tl.where(is_rope, ro, xo)

    if RING:
        out_row = out_ptr + (tl.load(pos_ptr + n) % ring_size).to(tl.int64) * stride_out
    else:
        out_row = out_ptr + n.to(tl.int64) * stride_out
    if FMT == 1:  # Q8_32: 16 channel pairs per ue8m0 scale
        NB: tl.constexpr = D // 32
        ae = tl.reshape(tl.abs(xe), (NB, 16))
        ao = tl.reshape(tl.abs(xo), (NB, 16))
        amax = tl.maximum(tl.maximum(tl.max(ae, axis=1), tl.max(ao, axis=1)), 1e-4)
        e = _pow2ceil_exp(amax * (1.0 / 448.0))  # (NB,)
        inv = ((254 - e) << 23).to(tl.float32, bitcast=True)  # exact 1/scale
        inv2 = tl.reshape(tl.broadcast_to(inv[:, None], (NB, 16)), (D // 2,))
        ce = _e4m3_code(tl.minimum(tl.maximum(xe * inv2, -448.0), 448.0))
        co = _e4m3_code(tl.minimum(tl.maximum(xo * inv2, -448.0), 448.0))
        codes = tl.reshape(tl.join(ce, co), (D,)).to(tl.uint8)
        tl.store(out_row + tl.arange(0, D), codes)
        tl.store(out_row + D + tl.arange(0, NB), e.to(tl.uint8))
    elif FMT == 2:  # Q4E4_16: 8 channel pairs per e4m3 scale
        NB: tl.constexpr = D // 16
        ae = tl.reshape(tl.abs(xe), (NB, 8))
        ao = tl.reshape(tl.abs(xo), (NB, 8))
        amax = tl.maximum(tl.maximum(tl.max(ae, axis=1), tl.max(ao, axis=1)), 6.0 * 2.0**-9)
        sc = _e4m3_code(tl.minimum(tl.math.div_rn(amax, tl.full(amax.shape, 6.0, tl.float32)),
                                   448.0))
        scale = sc.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
        s2 = tl.reshape(tl.broadcast_to(scale[:, None], (NB, 8)), (D // 2,))
        ce = _e2m1_code(tl.minimum(tl.maximum(tl.math.div_rn(xe, s2), -6.0), 6.0))
        co = _e2m1_code(tl.minimum(tl.maximum(tl.math.div_rn(xo, s2), -6.0), 6.0))
        tl.store(out_row + j, (ce | (co << 4)).to(tl.uint8))
        tl.store(out_row + D // 2 + tl.arange(0, NB), sc.to(tl.uint8))
    else:  # Q4E8_32: 16 channel pairs per ue8m0 scale
        NB: tl.constexpr = D // 32
        ae = tl.reshape(tl.abs(xe), (NB, 16))
        ao = tl.reshape(tl.abs(xo), (NB, 16))
        amax = tl.maximum(tl.maximum(tl.max(ae, axis=1), tl.max(ao, axis=1)), 6.0 * 2.0**-126)
        e = _pow2ceil_exp(amax * (1.0 / 6.0))
        inv = ((254 - e) << 23).to(tl.float32, bitcast=True)
        inv2 = tl.reshape(tl.broadcast_to(inv[:, None], (NB, 16)), (D // 2,))
        ce = _e2m1_code(tl.minimum(tl.maximum(xe * inv2, -6.0), 6.0))
        co = _e2m1_code(tl.minimum(tl.maximum(xo * inv2, -6.0), 6.0))
        tl.store(out_row + j, (ce | (co << 4)).to(tl.uint8))
        tl.store(out_row + D // 2 + tl.arange(0, NB), e.to(tl.uint8))


_RECORD_BYTES = {FMT_WINDOW: formats.window_record_bytes,
                 FMT_COMPRESSED: formats.compressed_record_bytes,
                 FMT_INDEX_KEY: formats.index_key_record_bytes}


def launch_meta(d: int, rope_dim: int, fmt: int, has_norm: bool, ring: bool) -> dict[str, Any]:
    """Constexprs and launch options of one launch (shared with the SM90 compile test)."""
    return dict(D=d, R=rope_dim, FMT=fmt, HAS_NORM=has_norm, RING=ring,
                num_warps=NUM_WARPS if d >= 256 else 1, num_stages=1)


def _launch(x, weight, eps, positions, inv_freq, fmt, out, ring_size=0):
    n, d = x.shape
    if x.stride(-1) != 1:
        raise ValueError("cache write: rows must be contiguous in the last dim")
    if n == 0:
        return out
    has_norm = weight is not None
    ring = ring_size > 0
    _norm_rope_quant_kernel[(n,)](
        x, x.stride(0), weight if has_norm else x, positions.contiguous(), inv_freq, out,
        out.stride(0),
        n, ring_size, float(eps),
        **launch_meta(d, 2 * inv_freq.numel(), fmt, has_norm, ring),
    )
    return out


def _records(x, weight, eps, positions, inv_freq, fmt):
    out = attn_common.alloc((x.shape[0], _RECORD_BYTES[fmt](x.shape[-1])), torch.uint8, x.device)
    return _launch(x, weight, eps, positions, inv_freq, fmt, out)


def window_kv_records(x: torch.Tensor, weight: torch.Tensor, eps: float,
                      positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """(N, D) wkv projections -> uint8 (N, D + D/32) window records (see the reference)."""
    return _records(x, weight, eps, positions, inv_freq, FMT_WINDOW)


def write_window_kv(x: torch.Tensor, weight: torch.Tensor, eps: float, positions: torch.Tensor,
                    inv_freq: torch.Tensor, ring: torch.Tensor) -> torch.Tensor:
    """Like :func:`window_kv_records`, written into ``ring[positions % W]`` (last W rows only)."""
    return _launch(x, weight, eps, positions, inv_freq, FMT_WINDOW, ring, ring.shape[0])


def compressed_kv_records(latents: torch.Tensor, positions: torch.Tensor,
                          inv_freq: torch.Tensor) -> torch.Tensor:
    """(G, D) pre-RoPE latents -> uint8 (G, D/2 + D/16) compressed records."""
    return _records(latents, None, 0.0, positions, inv_freq, FMT_COMPRESSED)


def index_key_records(x: torch.Tensor, weight: torch.Tensor, eps: float,
                      positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """(G, Di) wk projections -> uint8 (G, Di/2 + Di/32) index-key records."""
    return _records(x, weight, eps, positions, inv_freq, FMT_INDEX_KEY)


def supports_cache_write(spec: dict[str, Any]) -> bool:
    """head_dim a power of two in [64, 1024] (index keys: 128), rope_dim even and <= head_dim."""
    d = int(spec.get("head_dim", 512))
    r = int(spec.get("rope_dim", 64))
    return cuda_sm90(spec) and 64 <= d <= 1024 and d & (d - 1) == 0 and r % 2 == 0 and r <= d


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile cases at the released shapes (tests/kernels/triton/aot_attention_side.py)."""
    types = {"x_ptr": "*bf16", "w_ptr": "*bf16", "pos_ptr": "*i64", "freq_ptr": "*fp32",
             "out_ptr": "*u8", "eps": "fp32"}
    return [
        dict(name="window_kv 512 ring", module=__name__, kernel="_norm_rope_quant_kernel",
             types=types, meta=launch_meta(512, 64, FMT_WINDOW, True, True)),
        dict(name="window_kv 512 records", module=__name__, kernel="_norm_rope_quant_kernel",
             types=types, ci=False, meta=launch_meta(512, 64, FMT_WINDOW, True, False)),
        dict(name="compressed_kv 512", module=__name__, kernel="_norm_rope_quant_kernel",
             types=types, meta=launch_meta(512, 64, FMT_COMPRESSED, False, False)),
        dict(name="index_key 128", module=__name__, kernel="_norm_rope_quant_kernel",
             types=types, meta=launch_meta(128, 64, FMT_INDEX_KEY, True, False)),
    ]


def register_triton_cache_write() -> None:
    from deepinfer.kernels.reference import attention_fused as ref

    for op, fn, ref_fn in (
            ("window_kv_records", window_kv_records, ref.window_kv_records),
            ("write_window_kv", write_window_kv, ref.write_window_kv),
            ("compressed_kv_records", compressed_kv_records, ref.compressed_kv_records),
            ("index_key_records", index_key_records, ref.index_key_records)):
        attn_common.register_with_reference(op, fn, supports_cache_write, ref_fn)
