"""Engram table rows gathered and dequantized in one launch (registered op ``engram_rows``;
reference ``reference.engram.engram_rows``: ``table[ids]``, ``quantized.Fp8Rows.__getitem__``).

    out[i, c] = bf16(codes[ids[i], c] * 2^(scale[ids[i], c // 32] - 127))

Why: the torch gather of an FP8 table (``Fp8Rows.__getitem__``) runs as four launches and
three full-size intermediates — the codes and scales gathered, the fp32 products, the bf16
cast — ~260 µs of a 4K prompt's engram layer on the H200 (round 166's op table: ``index``
[24M, 256] 61 µs, ``mul`` [4096, 24, 8, 32] 81 µs, two ``copy_`` [4096, 24, 256] 116 µs) for
25 MB of table rows read and 50 MB of bf16 written. Here one program gathers ``BLOCK_ROWS``
rows of C codes and their C / 32 scale bytes and stores the bf16 rows: the same products (e4m3
x 2^k is exact in fp32 and in bf16), the same bits.

Shapes: codes (R, C) float8_e4m3fn (or its uint8 bytes), C a power of two >= 32; scale (R,
C / 32) ue8m0 (float8_e8m0fnu or uint8); ids any shape int64 -> out (*ids.shape, C) bf16. A
plain float table is indexed as it is (``table[ids]``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.kernels.quantized import Fp8Rows
from deepinfer.kernels.triton import quant_act
from deepinfer.kernels.triton.attn_common import ue8m0_to_f32
from deepinfer.kernels.triton.launch_math import cdiv

BLOCK_ROWS = 16  # table rows per program (16 x 256 codes: 4 KB in, 8 KB out)


@triton.jit
def _engram_rows_kernel(codes_ptr, scale_ptr, ids_ptr, out_ptr, num_ids, stride_c, stride_s,
                        C: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    """Rows ids[program's BLOCK_ROWS] of the table, dequantized to bf16."""
    i = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    ok = i < num_ids
    row = tl.load(ids_ptr + i, mask=ok, other=0).to(tl.int64)
    cols = tl.arange(0, C)
    codes = tl.load(codes_ptr + row[:, None] * stride_c + cols[None, :], mask=ok[:, None],
                    other=0)
    e = tl.load(scale_ptr + row[:, None] * stride_s + (cols // 32)[None, :], mask=ok[:, None],
                other=127).to(tl.int32)
    val = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32) * ue8m0_to_f32(e)
    tl.store(out_ptr + i.to(tl.int64)[:, None] * C + cols[None, :], val.to(tl.bfloat16),
             mask=ok[:, None])


def engram_rows(table: Fp8Rows | torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Registered op: rows ``ids`` (int64, any shape) of an engram table -> bf16 (*ids.shape,
    C), exact (see the module docstring); a plain tensor table is indexed as it is."""
    if not isinstance(table, Fp8Rows):
        return table[ids]
    codes, scale = table.codes.view(torch.uint8), table.scale.view(torch.uint8)
    num_rows, c = codes.shape
    assert c >= 32 and c & (c - 1) == 0, f"engram_rows: C {c} must be a power of two >= 32"
    assert codes.stride(1) == 1 and scale.stride(1) == 1
    flat = ids.reshape(-1).to(torch.int64).contiguous()
    out = torch.empty((flat.numel(), c), dtype=torch.bfloat16, device=codes.device)
    if flat.numel():
        _engram_rows_kernel[(cdiv(flat.numel(), BLOCK_ROWS), )](
            codes, scale, flat, out, flat.numel(), codes.stride(0), scale.stride(0), C=c,
            BLOCK_ROWS=BLOCK_ROWS, num_warps=4)
    return out.view(*ids.shape, c)


def supports_engram_rows(spec: dict) -> bool:
    """CUDA SM90+."""
    return quant_act.is_cuda_sm90_plus(spec)


def aot_cases() -> list[dict]:
    """SM90 compile-gate case (tests/kernels/triton/test_engram_rows.py): V4.1's 256-column
    rows."""
    return [{"id": "engram_rows_c256", "module": __name__, "kernel": "_engram_rows_kernel",
             "signature": {"codes_ptr": "*u8", "scale_ptr": "*u8", "ids_ptr": "*i64",
                           "out_ptr": "*bf16", "num_ids": "i32", "stride_c": "i32",
                           "stride_s": "i32"},
             "constexprs": {"C": 256, "BLOCK_ROWS": BLOCK_ROWS},
             "num_warps": 4, "num_stages": 1, "no_spill": True,
             "divisible": ["stride_c", "stride_s"]}]
