"""Decode-sized sparse MQA attention with sink over packed records, v2 (model-spec §2.1, §2.7).

Same op and semantics as ``attention._sparse_attn_sink_kernel`` over records (window FP8 rows
then selected compressed FP4 rows, each through its own per-query row list, one online softmax
in base 2, the sink added to the denominator; entries < 0 skipped; a query without any valid
row gets 0), organized so that each record byte is loaded and decoded once per program:

* one program = one query x ``BH`` heads x all ``D`` output channels (no output split, so q.k
  is computed once per head) x all of each row list (row splits, flash-decoding partials with a
  merge kernel, were slower and removed: ``attention.py``'s note);
* per chunk of ``BK`` rows the records are read with full-width contiguous loads (16 B per
  lane; record strides are multiples of 16), decoded once into two tiles ``k_e``, ``k_o``
  (BK, D/2) of the low and high channel halves, and the SAME tiles serve q.k and p.v (K = V,
  the shared 512-wide latent):

      S (BH, BK)     = q_e @ k_e^T + q_o @ k_o^T        q_e, q_o (BH, D/2): channel halves
      O_e (BH, D/2) += P @ k_e,  O_o likewise           P = exp2(S - m) per head (row of S)

  q is the wgmma A operand, loaded once before the row loop (loop-invariant); the tiles are
  the B operand of both products, in shared memory. (The transposed form, S^T = K q^T with the
  tile as the A operand from registers, compiled to more instructions and spills in SASS:
  Triton decoded the tile once per layout. Session 8, ``bench/attention_sass.py --v2``.);
* the next chunk's row indices are loaded one iteration ahead (a loop-carried value), so the
  record loads of a chunk do not wait on a fresh index load.

Record formats (``formats.pack_window_kv`` / ``pack_compressed_kv``):

    window     uint8 (W, D + D/32): byte c = e4m3 code of channel c; byte D + g = ue8m0 scale
               of channels [32g, 32g + 32)
    compressed uint8 (T, D/2 + D/16): byte j = e2m1 codes of channels 2j (low nibble) and 2j + 1
               (high nibble); byte D/2 + g = e4m3 scale of channels [16g, 16g + 16)

Dots run in q's dtype (bf16 on the GPU: every dequantized value is exact in bf16; fp32 under
the interpreter, whose bf16 arithmetic is wrong) with fp32 accumulation.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton.attn_common import e2m1_to_f32, ue8m0_to_f32
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2
from deepinfer.kernels.triton.mxfp4_unpack import E2M1X4_TO_BF16

# Launch configuration (one config: the interpreter cannot autotune; kernels.md §3.3).
BLOCK_HEADS = 64  # heads per program (the B operand's N; 64 heads = one program per query)
BLOCK_ROWS = 64  # rows per chunk (the wgmma M of S^T)
NUM_WARPS = 8
NUM_STAGES = 1


# e4m3 codes -> scaled bf16, four bytes per call (tl.inline_asm_elementwise, pack=4): $2 = bytes
# b0..b3 (channels c..c+3); $3, $4 = the bf16 multipliers of (b0, b1), (b2, b3); outputs $0, $1 =
# channels (c, c+1), (c+2, c+3) as bf16x2. Each byte goes to its own 16-bit half (prmt), its bits
# s eeee mmm to bf16 bits s|0000|eeee|mmm|0000 (= value * 2^-120, subnormal for e = 0: exact, as
# ``mxfp4_unpack.E2M1X4_TO_BF16``), then one bf16x2 multiply (fma with -0) by 2^(scale - 7).
E4M3X4_TO_BF16 = tl.constexpr("""
{
.reg .b32 z, t, a, b, nz;
mov.b32 z, 0;
mov.b32 nz, 0x80008000;
prmt.b32 t, $2, z, 0x4140;
shl.b32 a, t, 4; and.b32 a, a, 0x07F007F0; shl.b32 b, t, 8; and.b32 b, b, 0x80008000;
or.b32 a, a, b; fma.rn.bf16x2 $0, a, $3, nz;
prmt.b32 t, $2, z, 0x4342;
shl.b32 a, t, 4; and.b32 a, a, 0x07F007F0; shl.b32 b, t, 8; and.b32 b, b, 0x80008000;
or.b32 a, a, b; fma.rn.bf16x2 $1, a, $4, nz;
}
""")


@triton.jit
def _decode_fp8(row, m2, c0, D: tl.constexpr, BK: tl.constexpr, DT: tl.constexpr,
                ASM: tl.constexpr):
    """(BK,) row pointers of 528-B window records -> channels [c0, c0 + D/2) (BK, D/2) in DT.
    ASM (bf16 on the GPU): ``E4M3X4_TO_BF16``, about 3 instructions per channel; else fp32 tl
    ops (the interpreter's path), cast to DT."""
    c = tl.arange(0, D // 2)
    codes = tl.load(row[:, None] + c0 + c[None, :], mask=m2, other=0)  # uint8, 16 B per lane
    g = tl.arange(0, D // 64)
    se = tl.load(row[:, None] + D + c0 // 32 + g[None, :], mask=m2, other=127).to(tl.int32)
    if ASM:
        # 2^(se - 7) in bf16 bits ((se + 120) << 7; 2^-7 for the subnormal byte 0), NaN for 255
        s16 = tl.where(se == 255, 0x7FC0, (se + 120) << 7).to(tl.int16)
        s16 = tl.reshape(tl.broadcast_to(s16[:, :, None], (BK, D // 64, 32)), (BK, D // 2))
        val = tl.inline_asm_elementwise(E4M3X4_TO_BF16, "=r,=r,r,r,r",
                                        [codes, s16.to(tl.bfloat16, bitcast=True)],
                                        dtype=tl.bfloat16, is_pure=True, pack=4)
    else:
        scale = ue8m0_to_f32(se)
        val = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        val = tl.reshape(tl.reshape(val, (BK, D // 64, 32)) * scale[:, :, None], (BK, D // 2))
    return val.to(DT)


@triton.jit
def _decode_fp4(row, m2, c0, D: tl.constexpr, BK: tl.constexpr, DT: tl.constexpr,
                ASM: tl.constexpr):
    """(BK,) row pointers of 288-B compressed records -> channels [c0, c0 + D/2) (BK, D/2) in
    DT. ASM (bf16 on the GPU): ``mxfp4_unpack.E2M1X4_TO_BF16`` (e2m1 nibbles times bf16
    scales, exact); else fp32 tl ops (the interpreter's path), cast to DT. The low (even) and
    high (odd) nibbles are interleaved back into channel order in registers (join)."""
    j = tl.arange(0, D // 4)
    byte = tl.load(row[:, None] + c0 // 2 + j[None, :], mask=m2, other=0)  # (BK, D/4) uint8
    g = tl.arange(0, D // 32)
    sb = tl.load(row[:, None] + D // 2 + c0 // 16 + g[None, :], mask=m2, other=0)
    if ASM:
        s16 = sb.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16)  # e4m3 is exact in bf16
        s16 = tl.reshape(tl.broadcast_to(s16[:, :, None], (BK, D // 32, 8)), (BK, D // 4))
        even, odd = tl.inline_asm_elementwise(
            E2M1X4_TO_BF16, "=r,=r,=r,=r,r,r,r", [byte, s16], dtype=(tl.bfloat16, tl.bfloat16),
            is_pure=True, pack=4)
    else:
        b = byte.to(tl.int32)
        scale = sb.to(tl.float8e4nv, bitcast=True).to(tl.float32)[:, :, None]  # (BK, D/32, 1)
        even = tl.reshape(tl.reshape(e2m1_to_f32(b & 15), (BK, D // 32, 8)) * scale,
                          (BK, D // 4))
        odd = tl.reshape(tl.reshape(e2m1_to_f32(b >> 4), (BK, D // 32, 8)) * scale,
                         (BK, D // 4))
    return tl.reshape(tl.join(even, odd), (BK, D // 2)).to(DT)


@triton.jit
def _attend_list(q_e, q_o, m_i, l_i, acc_e, acc_o, n, rows_ptr, row_stride, idx_ptr,
                 idx_stride, num_idx, qk_scale, D: tl.constexpr, BK: tl.constexpr,
                 FP4: tl.constexpr, PREC: tl.constexpr, ASM: tl.constexpr):
    """Online-softmax update of one query over one row list. q_e, q_o: (BH, D/2); acc_e,
    acc_o: (BH, D/2) fp32; m_i, l_i: (BH,) fp32 in base 2."""
    kk = tl.arange(0, BK)
    idx_row = idx_ptr + n.to(tl.int64) * idx_stride
    idx = tl.load(idx_row + kk, mask=kk < num_idx, other=-1).to(tl.int32)
    for start in range(0, num_idx, BK):
        valid = idx >= 0
        row = rows_ptr + idx.to(tl.int64) * row_stride
        # prefetch the next chunk's indices (masked off past the list)
        nxt = start + BK + kk
        idx_next = tl.load(idx_row + nxt, mask=nxt < num_idx, other=-1).to(tl.int32)
        # the tile's low and high channel halves (BK, D/2)
        if FP4:
            k_e = _decode_fp4(row, valid[:, None], 0, D, BK, q_e.dtype, ASM)
            k_o = _decode_fp4(row, valid[:, None], D // 2, D, BK, q_e.dtype, ASM)
        else:
            k_e = _decode_fp8(row, valid[:, None], 0, D, BK, q_e.dtype, ASM)
            k_o = _decode_fp8(row, valid[:, None], D // 2, D, BK, q_e.dtype, ASM)
        s = tl.dot(q_e, tl.trans(k_e), input_precision=PREC)
        s = tl.dot(q_o, tl.trans(k_o), s, input_precision=PREC)
        s = tl.where(valid[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        pq = p.to(q_e.dtype)
        acc_e = tl.dot(pq, k_e, acc_e * alpha[:, None], input_precision=PREC)
        acc_o = tl.dot(pq, k_o, acc_o * alpha[:, None], input_precision=PREC)
        m_i = m_new
        idx = idx_next
    return m_i, l_i, acc_e, acc_o


@triton.jit
def _sparse_attn_decode_kernel(
    q_ptr, stride_qn, stride_qh,
    a_ptr, stride_a, ia_ptr, stride_ia, num_a,
    b_ptr, stride_b, ib_ptr, stride_ib, num_b,
    sink_ptr, out_ptr, stride_on, stride_oh,
    num_heads, qk_scale,
    D: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr, HAS_B: tl.constexpr,
    PREC: tl.constexpr, ASM: tl.constexpr = True,
):
    """Grid (N, cdiv(H, BH)). q (N, H, D), out (N, H, D) (last dim contiguous); a: window
    records uint8 (W, D + D/32) with lists ia (N, Ka); b: compressed records uint8
    (T, D/2 + D/16) with lists ib (N, Kb) (HAS_B); sink (H,) fp32; qk_scale = softmax scale *
    log2(e). out = the attention."""
    n = tl.program_id(0)
    h = tl.program_id(1) * BH + tl.arange(0, BH)
    hmask = h < num_heads
    j = tl.arange(0, D // 2)
    # q's channel halves, loaded once (loop-invariant dot operands), and the accumulators
    q_cols = q_ptr + n.to(tl.int64) * stride_qn + h[:, None] * stride_qh + j[None, :]
    q_e = tl.load(q_cols, mask=hmask[:, None], other=0.0)
    q_o = tl.load(q_cols + D // 2, mask=hmask[:, None], other=0.0)
    acc_e = tl.zeros((BH, D // 2), tl.float32)
    acc_o = acc_e
    m_i = tl.full((BH,), float("-inf"), tl.float32)
    l_i = tl.zeros((BH,), tl.float32)
    m_i, l_i, acc_e, acc_o = _attend_list(q_e, q_o, m_i, l_i, acc_e, acc_o, n, a_ptr, stride_a,
                                          ia_ptr, stride_ia, num_a, qk_scale, D, BK, False,
                                          PREC, ASM)
    if HAS_B:
        m_i, l_i, acc_e, acc_o = _attend_list(q_e, q_o, m_i, l_i, acc_e, acc_o, n, b_ptr,
                                              stride_b, ib_ptr, stride_ib, num_b, qk_scale,
                                              D, BK, True, PREC, ASM)
    sink = tl.load(sink_ptr + h, mask=hmask, other=0.0).to(tl.float32) * 1.4426950408889634
    m_use = tl.where(m_i == float("-inf"), 0.0, m_i)
    inv = 1.0 / (l_i + tl.exp2(sink - m_use))
    o_cols = out_ptr + n.to(tl.int64) * stride_on + h[:, None] * stride_oh + j[None, :]
    tl.store(o_cols, (acc_e * inv[:, None]).to(out_ptr.dtype.element_ty), mask=hmask[:, None])
    tl.store(o_cols + D // 2, (acc_o * inv[:, None]).to(out_ptr.dtype.element_ty),
             mask=hmask[:, None])


def launch_meta(d: int, h: int, has_b: bool, q_dtype: torch.dtype = torch.bfloat16,
                on_gpu: bool = True) -> dict[str, Any]:
    """Constexprs and launch options of one decode launch (shared with the SM90 compile test).
    fp32 q keeps fp32 dots ("ieee"; the GPU default would be tf32). The inline-PTX record
    decode (ASM) needs bf16 q on a GPU; otherwise the tl twin runs (the interpreter)."""
    return dict(D=d, BH=min(BLOCK_HEADS, max(16, next_power_of_2(h))), BK=BLOCK_ROWS,
                HAS_B=has_b, PREC="ieee" if q_dtype == torch.float32 else "tf32",
                ASM=on_gpu and q_dtype == torch.bfloat16, num_warps=NUM_WARPS,
                num_stages=NUM_STAGES)


def supports(d: int, fmt_a: int, fmt_b: int, has_b: bool) -> bool:
    """v2 handles records only: FP8 window rows (format 1) and optionally FP4 compressed rows
    (format 2), head_dim a power of two >= 64 (D/32 scale groups, wgmma K steps)."""
    return fmt_a == 1 and (fmt_b == 2 or not has_b) and d >= 64 and d & (d - 1) == 0


def launch(q: torch.Tensor, a: torch.Tensor, ia: torch.Tensor, b: torch.Tensor,
           ib: torch.Tensor, has_b: bool, sink: torch.Tensor, softmax_scale: float,
           out: torch.Tensor) -> torch.Tensor:
    """Run v2 into ``out`` (N, H, D). a/ia: window records and lists; b/ib: compressed records
    and lists (ignored unless ``has_b``; pass a/ia as placeholders). Returns ``out``."""
    n, h, d = q.shape
    if n == 0:
        return out
    meta = launch_meta(d, h, has_b, q.dtype, on_gpu=q.is_cuda)
    grid = (n, cdiv(h, meta["BH"]))
    _sparse_attn_decode_kernel[grid](
        q, q.stride(0), q.stride(1),
        a, a.stride(0), ia, ia.stride(0), ia.shape[-1],
        b, b.stride(0), ib, ib.stride(0), ib.shape[-1] if has_b else 0,
        sink, out, out.stride(0), out.stride(1),
        h, float(softmax_scale) * 1.4426950408889634, **meta,
    )
    return out


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile cases (tests/kernels/triton/aot_attention_side.py): the slice model's decode
    launch (64 heads x 512, window + compressed records, and window only)."""
    types = {"q_ptr": "*bf16", "out_ptr": "*bf16", "sink_ptr": "*fp32", "ia_ptr": "*i64",
             "ib_ptr": "*i64", "a_ptr": "*u8", "b_ptr": "*u8", "qk_scale": "fp32"}
    kernel = "_sparse_attn_decode_kernel"
    return [
        dict(name="sparse_attn v2 records_window+compressed H64 D512", module=__name__,
             kernel=kernel, types=types, meta=launch_meta(512, 64, True)),
        dict(name="sparse_attn v2 records_window_only H64 D512", module=__name__, kernel=kernel,
             types=types, ci=False, meta=launch_meta(512, 64, False)),
    ]
