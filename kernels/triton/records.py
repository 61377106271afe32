"""Cache records to and from rows in one launch each: the prefill path's packing of window
records and its unpacking of window, compressed and index-key records to bf16 rows.

References: ``kernels/formats.py`` (``pack_window_kv``, ``unpack_window_kv``,
``unpack_compressed_kv``, ``unpack_index_key``), registered under the same op names. The torch
forms take 8-17 elementwise launches per call; a prefill layer made ~45 of them (session 24,
tests/runtime/test_batched_decode.py counts the model's launching ops), each ~10-50 µs of
host time on the H200 machine, where a lone prompt below ~4K tokens is host-bound.

    pack_window_kv:       x (R, D) float -> (R, D + D/32) uint8   (Q8_32: e4m3 codes, ue8m0)
    unpack_window_kv:     (R, D + D/32) uint8 -> (R, D)           code * 2^(s - 127)
    unpack_compressed_kv: (R, D/2 + D/16) uint8 -> (R, D)         e2m1 * e4m3 scale per 16
    unpack_index_key:     (R, D/2 + D/32) uint8 -> (R, D)         e2m1 * 2^(s - 127) per 32

Byte for byte the references' results, non-finite cases included: a block with a NaN or an
infinity packs as scale byte 255 with every code 0x7F (the reference's NaN elements: a NaN code
of either sign, as the platform propagates x / NaN); scale byte 255 unpacks as NaN, byte 0
as 2^-127. Values are formed in fp32 (exact: at most 6 significant bits, or an fp32
subnormal) and rounded to bf16 in integer arithmetic (round to nearest even, NaN 0x7FC0: torch's
CPU conversion), so the interpreter and the GPU give the same bits. Output dtype bf16 or fp32;
any other dtype runs the reference.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels import formats
from deepinfer.kernels.triton.attn_common import e2m1_to_f32, register_with_reference
from deepinfer.kernels.triton.attn_common import ue8m0_to_f32 as ue8m0_any_to_f32
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2
from deepinfer.kernels.triton.quant_act import is_cuda_sm90_plus, q8_32_groups

ROWS_PER_PROGRAM = 4  # records per program: a 512-channel row is 1 KB of bf16
FMT_FP8 = 0  # window records: e4m3 codes, ue8m0 per 32
FMT_FP4_E4M3 = 1  # compressed entries: e2m1 pairs, e4m3 per 16
FMT_FP4_UE8M0 = 2  # index keys: e2m1 pairs, ue8m0 per 32


@triton.jit
def _bf16_bits(y):
    """fp32 -> bf16 bit pattern (int16), round to nearest even; NaN -> 0x7FC0."""
    bits = y.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return tl.where(y != y, 0x7FC0, rounded).to(tl.int16)


@triton.jit
def _e4m3_to_f32(code):
    """e4m3fn bytes (int32) -> fp32, from the bit pattern (the interpreter's fp8 cast gets NaN
    codes wrong): normal (1 + m/8) 2^(e-7), subnormal m 2^-9, code 0x7F / 0xFF NaN."""
    e = (code >> 3) & 15
    m = code & 7
    normal = ((e + 120) << 23) | (m << 20)
    bits = tl.where(e == 0, (m.to(tl.float32) * 0.001953125).to(tl.int32, bitcast=True), normal)
    bits = tl.where((code & 0x7F) == 0x7F, 0x7FC00000, bits)
    return (bits | ((code & 0x80) << 24)).to(tl.float32, bitcast=True)


@triton.jit
def _pack_window_kernel(x_ptr, out_ptr, num_rows, stride_x, D: tl.constexpr,
                        BG: tl.constexpr, ROWS: tl.constexpr):
    """ROWS rows of x -> window records; one [BG, 32] tile of 32-channel blocks per row."""
    groups = tl.arange(0, BG)
    cols = groups[:, None] * 32 + tl.arange(0, 32)[None, :]  # [BG, 32]
    gmask = groups < D // 32
    for i in tl.static_range(ROWS):
        row = tl.program_id(0).to(tl.int64) * ROWS + i
        if row < num_rows:
            x = tl.load(x_ptr + row * stride_x + cols, mask=gmask[:, None], other=0.0)
            x = x.to(tl.float32)
            codes, e = q8_32_groups(x, 1)  # e: [BG, 1] (255 for an infinite amax)
            nan = tl.max((x != x).to(tl.int32), axis=1, keep_dims=True)  # max() drops NaN
            e = tl.where(nan != 0, 255, e)
            byte = tl.where(e == 255, 0x7F, codes.to(tl.uint8, bitcast=True).to(tl.int32))
            rec = out_ptr + row * (D + D // 32)
            tl.store(rec + cols, byte.to(tl.uint8), mask=gmask[:, None])
            tl.store(rec + D + groups, tl.max(e, axis=1).to(tl.uint8), mask=gmask)


@triton.jit
def _unpack_kernel(rec_ptr, out_ptr, num_rows, stride_rec, D: tl.constexpr, BD: tl.constexpr,
                   FMT: tl.constexpr, OUT_BF16: tl.constexpr, ROWS: tl.constexpr):
    """ROWS records -> ROWS rows of D values (FMT: FMT_FP8 / FMT_FP4_E4M3 / FMT_FP4_UE8M0)."""
    c = tl.arange(0, BD)
    cmask = c < D
    for i in tl.static_range(ROWS):
        row = tl.program_id(0).to(tl.int64) * ROWS + i
        if row < num_rows:
            rec = rec_ptr + row * stride_rec
            if FMT == 0:  # FMT_FP8
                value = _e4m3_to_f32(tl.load(rec + c, mask=cmask, other=0).to(tl.int32))
                s = tl.load(rec + D + c // 32, mask=cmask, other=0).to(tl.int32)
                scale = ue8m0_any_to_f32(s)
            else:
                byte = tl.load(rec + c // 2, mask=cmask, other=0).to(tl.int32)
                value = e2m1_to_f32((byte >> ((c & 1) * 4)) & 15)
                if FMT == 1:  # FMT_FP4_E4M3
                    s = tl.load(rec + D // 2 + c // 16, mask=cmask, other=0).to(tl.int32)
                    scale = _e4m3_to_f32(s)
                else:
                    s = tl.load(rec + D // 2 + c // 32, mask=cmask, other=0).to(tl.int32)
                    scale = ue8m0_any_to_f32(s)
            y = value * scale
            if OUT_BF16:
                tl.store(out_ptr + row * D + c, _bf16_bits(y), mask=cmask)
            else:
                tl.store(out_ptr + row * D + c, y, mask=cmask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """[..., C] -> (R, C) with unit stride in the last dim (a view where possible)."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def pack_window_kv(x: torch.Tensor) -> torch.Tensor:
    """:func:`formats.pack_window_kv` in one launch: x float [..., D] (D % 32 == 0) ->
    uint8 [..., D + D/32]."""
    d = x.shape[-1]
    if d % 32 or x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return formats.pack_window_kv(x)
    x2 = _rows(x)
    out = torch.empty(x2.shape[0], d + d // 32, dtype=torch.uint8, device=x.device)
    if x2.shape[0]:
        grid = (cdiv(x2.shape[0], ROWS_PER_PROGRAM),)
        _pack_window_kernel[grid](x2, out, x2.shape[0], x2.stride(0), D=d,
                                  BG=next_power_of_2(d // 32), ROWS=ROWS_PER_PROGRAM,
                                  num_warps=4)
    return out.reshape(*x.shape[:-1], d + d // 32)


def _unpack(rec: torch.Tensor, head_dim: int, dtype: torch.dtype, fmt: int, ref: Any,
            record_bytes: int) -> torch.Tensor:
    if dtype not in (torch.bfloat16, torch.float32) or rec.dtype != torch.uint8 \
            or rec.shape[-1] != record_bytes:
        return ref(rec, head_dim, dtype)  # the reference's own checks and dtypes
    r2 = _rows(rec)
    out = torch.empty(r2.shape[0], head_dim, dtype=dtype, device=rec.device)
    if r2.shape[0]:
        grid = (cdiv(r2.shape[0], ROWS_PER_PROGRAM),)
        dst = out.view(torch.int16) if dtype == torch.bfloat16 else out
        _unpack_kernel[grid](r2, dst, r2.shape[0], r2.stride(0), D=head_dim,
                             BD=next_power_of_2(head_dim), FMT=fmt,
                             OUT_BF16=dtype == torch.bfloat16, ROWS=ROWS_PER_PROGRAM,
                             num_warps=4)
    return out.reshape(*rec.shape[:-1], head_dim)


def unpack_window_kv(rec: torch.Tensor, head_dim: int,
                     dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """:func:`formats.unpack_window_kv` in one launch: uint8 [..., D + D/32] -> dtype [..., D]."""
    return _unpack(rec, head_dim, dtype, FMT_FP8, formats.unpack_window_kv,
                   formats.window_record_bytes(head_dim))


def unpack_compressed_kv(rec: torch.Tensor, head_dim: int,
                         dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """:func:`formats.unpack_compressed_kv` in one launch: uint8 [..., D/2 + D/16] -> [..., D]."""
    return _unpack(rec, head_dim, dtype, FMT_FP4_E4M3, formats.unpack_compressed_kv,
                   formats.compressed_record_bytes(head_dim))


def unpack_index_key(rec: torch.Tensor, head_dim: int,
                     dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """:func:`formats.unpack_index_key` in one launch: uint8 [..., D/2 + D/32] -> [..., D]."""
    return _unpack(rec, head_dim, dtype, FMT_FP4_UE8M0, formats.unpack_index_key,
                   formats.index_key_record_bytes(head_dim))


def supports_records(spec: dict[str, Any]) -> bool:
    """A CUDA device of compute capability >= 9 (any head dim: the wrappers fall back to the
    reference for what they do not cover)."""
    return is_cuda_sm90_plus(spec)


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile cases at the released shapes (head_dim 512, index keys 128)."""
    cases = [dict(name="pack_window_kv 512", module=__name__, kernel="_pack_window_kernel",
                  types={"x_ptr": "*bf16", "out_ptr": "*u8"}, wgmma_free=True,
                  meta=dict(D=512, BG=16, ROWS=ROWS_PER_PROGRAM, num_warps=4))]
    for name, fmt, d in (("window", FMT_FP8, 512), ("compressed", FMT_FP4_E4M3, 512),
                         ("index_key", FMT_FP4_UE8M0, 128)):
        cases.append(dict(name=f"unpack_{name} {d}", module=__name__, kernel="_unpack_kernel",
                          types={"rec_ptr": "*u8", "out_ptr": "*i16"}, wgmma_free=True,
                          meta=dict(D=d, BD=d, FMT=fmt, OUT_BF16=True, ROWS=ROWS_PER_PROGRAM,
                                    num_warps=4)))
    return cases


def register_triton_records() -> None:
    for op, fn, ref_fn in (("pack_window_kv", pack_window_kv, formats.pack_window_kv),
                           ("unpack_window_kv", unpack_window_kv, formats.unpack_window_kv),
                           ("unpack_compressed_kv", unpack_compressed_kv,
                            formats.unpack_compressed_kv),
                           ("unpack_index_key", unpack_index_key, formats.unpack_index_key)):
        register_with_reference(op, fn, supports_records, ref_fn)
