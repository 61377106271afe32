"""Sparse MQA attention with a per-head sink over explicit row lists (model-spec §2.1, §2.7).

One program owns one query token and ``BH`` of its heads (64 heads of 512 share one K=V latent, so
a K tile loaded once serves every head of the program). It walks up to two row lists (the window
ring, then the selected compressed entries) in chunks of ``BK`` rows with an online softmax in
base 2 (running max, running sum, rescaled fp32 accumulator) and adds the sink to the denominator
at the end.

Rows come in one of three formats (constexpr ``FMT``), dequantized in registers:

    FMT_FLOAT  fp32/fp16/bf16 rows of D values (the registered ``sparse_attention_sink`` op)
    FMT_FP8    528-B window records: D e4m3 bytes | D/32 ue8m0 scale bytes
    FMT_FP4    288-B compressed records: D/2 e2m1 pair bytes | D/16 e4m3 scale bytes

Channels are handled as two halves of D/2, pair j = (channel j*CS, channel j*CS + PS). Records
take the interleaved pairs (CS=2, PS=1: channel 2j and 2j + 1): one FP4 byte holds exactly one
even and one odd channel, so a record is read once, coalesced, with no nibble interleave. Float
rows take contiguous halves (CS=1, PS=D/2: channels j and D/2 + j), so every load is a run of
neighbouring elements (vectorized) instead of a stride-2 gather. q and the accumulator are split
the same way and the output is stored back in place; the q.k sum only runs in another order.
Dots run in q's dtype (bf16 on the GPU: every dequantized value is exact in bf16) with fp32
accumulation.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels import formats
from deepinfer.kernels.triton import attention_decode, attention_prefill_pairs, attn_common
from deepinfer.kernels.triton.attn_common import cuda_sm90, e2m1_to_f32, ue8m0_to_f32
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2

FMT_FLOAT = 0
FMT_FP8 = 1
FMT_FP4 = 2

_LOG2E = 1.4426950408889634

# Launch configuration (one config: the interpreter cannot autotune; kernels.md §3.3).
BLOCK_HEADS = 64
DOT_SLICE = 64  # channel pairs per q.k slice
DV_SPLIT = 2  # programs per (query, head block), each accumulating 1/DV_SPLIT of the output
BLOCK_ROWS = 16
# Prefill-sized launches (more than PREFILL_MIN_QUERIES queries): rows per online-softmax chunk,
# heads per program, output split across programs and pipeline stages. Measured on the H200 at
# 4,096 queries x 64 heads x 640 bf16 rows (bench/attention_prefill.py, docs/performance.md
# session 5): 32 rows, 64 heads, no split (q.k computed once per head), 2 stages: 2.18 ms, against
# 23.7 ms for the former interleaved 64-row split-2 launch and 3.4-6.2 ms for the other variants
# (64 rows at 2 stages needs more than SM90's 227 KB of shared memory).
PREFILL_BLOCK_ROWS = 32
PREFILL_MIN_QUERIES = 256
PREFILL_BLOCK_HEADS = 64
PREFILL_DV_SPLIT = 1
PREFILL_NUM_STAGES = 2
# (Decode row splits — flash-decoding partials over 1/DECODE_ROW_SPLITS of each row list and a
# merge kernel, here and in attention_decode — were removed: slower on the H200, v1 0.344 ->
# 0.430 / 0.563 / 0.821 ms with 2 / 4 / 8 splits at 64 x 4K in round 17, v2 0.126 -> 0.143 and
# 0.225 -> 0.333 ms with 2 in round 25; code at commit bf55292.)
# Decode kernel for decode-sized record launches (<= PREFILL_MIN_QUERIES queries, FP8 window +
# FP4 compressed records): "v1" = _sparse_attn_sink_kernel below; "v2" = attention_decode (each
# record decoded once per program, one tile for q.k and p.v, q loaded once, no output split).
# H200, session 8 round 25 (bench/attention_decode.py, one run): v2 at 64 rows per chunk, no
# row split: 0.126 vs 0.379 ms at 64 queries x 4K, 0.225 vs 1.190 ms at 256 x 32K (max abs
# difference 2e-3: bf16 operands). Float rows and prefill-sized launches stay on v1.
DECODE_KERNEL = "v2"
# Prefill-sized launches over bf16 rows on an SM90 GPU: "pairs" = attention_prefill_pairs (wgmmas,
# each math warpgroup its own chunk of a pair, O's columns split, rows gathered by cp.async);
# "triton" = the kernel below. The Gluon kernel before it split S's and O's columns of every chunk
# over both warpgroups (attention_prefill_gluon, session 18): H100, session 44 (round 216), pairs
# 0.834-0.839 ms against its 1.072-1.200 at 4,096 queries x 640 rows, the lone 4K prompt's
# attention 6.54 -> 5.29 ms; deleted (code at commit 29ce34a).
PREFILL_KERNEL = "pairs"
# float rows as contiguous channel halves (False: interleaved pairs like records; for comparison)
FLOAT_HALVES = True
NUM_WARPS = 8
NUM_STAGES = 2


@triton.jit
def _load_rows(base_ptr, row_stride, idx, valid, j0, D: tl.constexpr, DJ: tl.constexpr,
               FMT: tl.constexpr, CS: tl.constexpr, PS: tl.constexpr):
    """Rows ``idx`` (BK,) of a row array -> (first, second) fp32 members of channel pairs
    [j0, j0 + DJ), each (BK, DJ); 0 where invalid. Float rows: pair j = channels
    (j*CS, j*CS + PS); records always interleave (CS=2, PS=1)."""
    j = j0 + tl.arange(0, DJ)
    row = base_ptr + idx.to(tl.int64)[:, None] * row_stride
    m2 = valid[:, None]
    if FMT == 0:
        even = tl.load(row + CS * j[None, :], mask=m2, other=0.0).to(tl.float32)
        odd = tl.load(row + CS * j[None, :] + PS, mask=m2, other=0.0).to(tl.float32)
    elif FMT == 1:
        # Bytes 2j and 2j+1 are neighbours: both loads hit the same sectors of the record.
        ce = tl.load(row + 2 * j[None, :], mask=m2, other=0)
        co = tl.load(row + 2 * j[None, :] + 1, mask=m2, other=0)
        se = tl.load(row + D + j[None, :] // 16, mask=m2, other=127).to(tl.int32)
        scale = ue8m0_to_f32(se)
        even = ce.to(tl.float8e4nv, bitcast=True).to(tl.float32) * scale
        odd = co.to(tl.float8e4nv, bitcast=True).to(tl.float32) * scale
    else:
        byte = tl.load(row + j[None, :], mask=m2, other=0).to(tl.int32)
        sb = tl.load(row + D // 2 + j[None, :] // 8, mask=m2, other=0)
        scale = sb.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        even = e2m1_to_f32(byte & 15) * scale
        odd = e2m1_to_f32((byte >> 4) & 15) * scale
    return even, odd


@triton.jit
def _attend_list(q_rows, hmask, m_i, l_i, acc_e, acc_o, n, j0, rows_ptr, row_stride, idx_ptr,
                 idx_stride, num_idx, qk_scale, D: tl.constexpr, DJ: tl.constexpr,
                 DC: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
                 PREC: tl.constexpr, CS: tl.constexpr, PS: tl.constexpr):
    """Online-softmax update over one query's row list (entries < 0 are skipped).

    q . k runs over D in slices of DC channel pairs (q slices are re-read from L1/L2 each
    chunk), which bounds the registers live at once to one slice of q and of the K tile.
    """
    kk = tl.arange(0, BK)
    jc = tl.arange(0, DC)
    for start in range(0, num_idx, BK):
        in_list = start + kk < num_idx
        idx = tl.load(idx_ptr + n * idx_stride + start + kk, mask=in_list, other=-1)
        valid = idx >= 0
        s = tl.zeros((acc_e.shape[0], BK), tl.float32)
        for c in tl.static_range(0, D // 2, DC):
            q_e = tl.load(q_rows + CS * (c + jc)[None, :], mask=hmask[:, None], other=0.0)
            q_o = tl.load(q_rows + CS * (c + jc)[None, :] + PS, mask=hmask[:, None], other=0.0)
            k_e, k_o = _load_rows(rows_ptr, row_stride, idx, valid, c, D, DC, FMT, CS, PS)
            s = tl.dot(q_e, tl.trans(k_e.to(q_e.dtype)), s, input_precision=PREC)
            s = tl.dot(q_o, tl.trans(k_o.to(q_e.dtype)), s, input_precision=PREC)
        s = tl.where(valid[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        pq = p.to(q_rows.dtype.element_ty)
        v_e, v_o = _load_rows(rows_ptr, row_stride, idx, valid, j0, D, DJ, FMT, CS, PS)
        acc_e = tl.dot(pq, v_e.to(pq.dtype), acc_e * alpha[:, None], input_precision=PREC)
        acc_o = tl.dot(pq, v_o.to(pq.dtype), acc_o * alpha[:, None], input_precision=PREC)
        m_i = m_new
    return m_i, l_i, acc_e, acc_o


@triton.jit
def _sparse_attn_sink_kernel(
    q_ptr, stride_qn, stride_qh,
    a_ptr, stride_a, ia_ptr, stride_ia, num_a,
    b_ptr, stride_b, ib_ptr, stride_ib, num_b,
    sink_ptr, out_ptr, stride_on, stride_oh,
    num_heads, qk_scale,
    D: tl.constexpr, DJ: tl.constexpr, DC: tl.constexpr, BH: tl.constexpr,
    BK: tl.constexpr, FMT_A: tl.constexpr, FMT_B: tl.constexpr, HAS_B: tl.constexpr,
    PREC: tl.constexpr, CS: tl.constexpr, PS: tl.constexpr,
):
    """out = softmax-with-sink attention; grid (N, cdiv(H, BH), D/2 / DJ): a program's query,
    head block and output channel pairs [j0, j0 + DJ)."""
    n = tl.program_id(0)
    hb = tl.program_id(1)
    DVS: tl.constexpr = D // 2 // DJ  # output slices per (query, head block)
    # output channel pairs [j0, j0 + DJ) of this program (the grid's third axis has DVS
    # programs; % DVS makes j0 the constant 0 when DVS is 1, as at prefill)
    j0 = (tl.program_id(2) % DVS) * DJ
    h = hb * BH + tl.arange(0, BH)
    hmask = h < num_heads
    q_rows = q_ptr + n.to(tl.int64) * stride_qn + h[:, None] * stride_qh

    m_i = tl.full((BH,), float("-inf"), tl.float32)
    l_i = tl.zeros((BH,), tl.float32)
    acc_e = tl.zeros((BH, DJ), tl.float32)
    acc_o = tl.zeros((BH, DJ), tl.float32)
    m_i, l_i, acc_e, acc_o = _attend_list(q_rows, hmask, m_i, l_i, acc_e, acc_o, n, j0,
                                          a_ptr, stride_a, ia_ptr, stride_ia, num_a, qk_scale,
                                          D, DJ, DC, BK, FMT_A, PREC, CS, PS)
    if HAS_B:
        m_i, l_i, acc_e, acc_o = _attend_list(q_rows, hmask, m_i, l_i, acc_e, acc_o, n, j0,
                                              b_ptr, stride_b, ib_ptr, stride_ib, num_b,
                                              qk_scale, D, DJ, DC, BK, FMT_B, PREC, CS, PS)
    jo = j0 + tl.arange(0, DJ)
    sink = tl.load(sink_ptr + h, mask=hmask, other=0.0).to(tl.float32) * 1.4426950408889634
    m_use = tl.where(m_i == float("-inf"), 0.0, m_i)
    denom = l_i + tl.exp2(sink - m_use)
    out_e = acc_e / denom[:, None]
    out_o = acc_o / denom[:, None]
    o_rows = out_ptr + n.to(tl.int64) * stride_on + h[:, None] * stride_oh
    tl.store(o_rows + CS * jo[None, :], out_e.to(out_ptr.dtype.element_ty),
             mask=hmask[:, None])
    tl.store(o_rows + CS * jo[None, :] + PS, out_o.to(out_ptr.dtype.element_ty),
             mask=hmask[:, None])


def launch_meta(d: int, h: int, fmt_a: int, fmt_b: int, has_b: bool,
                q_dtype: torch.dtype = torch.bfloat16, num_queries: int = 1) -> dict[str, Any]:
    """Constexprs and launch options of one launch (shared with the SM90 compile test).
    fp32 q keeps fp32 dots ("ieee"; the GPU default would be tf32). Float rows (both lists
    FMT_FLOAT) take contiguous channel halves, records interleaved pairs."""
    prefill = num_queries > PREFILL_MIN_QUERIES
    split = max(1, min(PREFILL_DV_SPLIT if prefill else DV_SPLIT, d // 64))
    heads = PREFILL_BLOCK_HEADS if prefill else BLOCK_HEADS
    float_rows = FLOAT_HALVES and fmt_a == FMT_FLOAT and (fmt_b == FMT_FLOAT or not has_b)
    return dict(D=d, DJ=d // 2 // split, DC=min(DOT_SLICE, d // 2),
                BH=min(heads, next_power_of_2(h)),
                BK=PREFILL_BLOCK_ROWS if prefill else BLOCK_ROWS,
                FMT_A=fmt_a, FMT_B=fmt_b, HAS_B=has_b,
                PREC="ieee" if q_dtype == torch.float32 else "tf32",
                CS=1 if float_rows else 2, PS=d // 2 if float_rows else 1,
                num_warps=NUM_WARPS, num_stages=PREFILL_NUM_STAGES if prefill else NUM_STAGES)


def _prefill_gluon(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor,
                   has_b: bool) -> bool:
    """Whether float rows (one row list) go to the Gluon prefill kernel."""
    return (PREFILL_KERNEL == "pairs" and q.shape[0] > PREFILL_MIN_QUERIES and not has_b
            and attention_prefill_pairs.accepts(q, kv, indices))


def _launch(q, a, fmt_a, ia, b, fmt_b, ib, sink, softmax_scale, out):
    n, h, d = q.shape
    if q.stride(-1) != 1 or (fmt_a == FMT_FLOAT and a.stride(-1) != 1):
        raise ValueError("sparse attention: q and kv rows must be contiguous in the last dim")
    has_b = b is not None and ib is not None and ib.shape[-1] > 0 and b.shape[0] > 0
    if not has_b:
        b, ib = a, ia
    if n == 0:
        return out
    if (DECODE_KERNEL == "v2" and n <= PREFILL_MIN_QUERIES
            and attention_decode.supports(d, fmt_a, fmt_b, has_b)):
        return attention_decode.launch(q, a, ia, b, ib, has_b, sink, softmax_scale, out)
    if fmt_a == FMT_FLOAT and _prefill_gluon(q, a, ia, has_b):
        return attention_prefill_pairs.sparse_attention_sink_pairs(q, a, ia, sink,
                                                                   softmax_scale, out)
    meta = launch_meta(d, h, fmt_a, fmt_b, has_b, q.dtype, num_queries=n)
    grid = (n, cdiv(h, meta["BH"]), d // 2 // meta["DJ"])
    _sparse_attn_sink_kernel[grid](
        q, q.stride(0), q.stride(1),
        a, a.stride(0), ia, ia.stride(0), ia.shape[-1],
        b, b.stride(0), ib, ib.stride(0), ib.shape[-1] if has_b else 0,
        sink, out, out.stride(0), out.stride(1),
        h, float(softmax_scale) * _LOG2E, **meta,
    )
    return out


def sparse_attention_sink(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor,
                          sink: torch.Tensor, softmax_scale: float,
                          out: torch.Tensor | None = None,
                          row_counts: torch.Tensor | None = None) -> torch.Tensor:
    """Triton version of ``reference.attention.sparse_attention_sink`` (same arguments/result):
    q (N, H, D), kv (M, D) float rows, indices (N, K) int (-1 ignored), sink (H,) fp32; ``out``
    (N, H, D) in q's dtype with contiguous channels (e.g. a row slice of the layer's output):
    written in place, no copy. ``row_counts`` (N,): query n's first row_counts[n] entries only —
    the Gluon prefill kernel runs cdiv(count, 64) chunks of the row (a prompt's picks end in
    -1 padding); the other kernels get the entries past the count as -1 (a torch mask)."""
    if out is None:
        out = attn_common.alloc(q.shape, q.dtype, q.device)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(-1) != 1:
        raise ValueError(f"sparse attention: out {tuple(out.shape)} {out.dtype} must match q "
                         f"{tuple(q.shape)} {q.dtype} with contiguous channels")
    if row_counts is not None and q.shape[0]:
        if _prefill_gluon(q, kv, indices, False):
            return attention_prefill_pairs.sparse_attention_sink_pairs(
                q, kv, indices, sink, softmax_scale, out, row_counts)
        listed = torch.arange(indices.shape[-1], device=indices.device)
        indices = torch.where(listed[None, :] < row_counts[:, None], indices, -1)
    return _launch(q, kv, FMT_FLOAT, indices, None, FMT_FLOAT, None, sink, softmax_scale, out)


def sparse_attention_sink_records(q: torch.Tensor, window: torch.Tensor,
                                  window_indices: torch.Tensor, compressed: torch.Tensor | None,
                                  compressed_indices: torch.Tensor | None, sink: torch.Tensor,
                                  softmax_scale: float) -> torch.Tensor:
    """Triton version of ``reference.attention_fused.sparse_attention_sink_records``: one softmax
    over window records (uint8 (W, D + D/32)) and compressed records (uint8 (T, D/2 + D/16))
    addressed by their own per-query row lists, dequantized in the kernel."""
    d = q.shape[-1]
    if window.shape[-1] != formats.window_record_bytes(d):
        raise ValueError(f"window records must be {formats.window_record_bytes(d)} B wide")
    if compressed is not None and compressed.shape[-1] != formats.compressed_record_bytes(d):
        raise ValueError(f"compressed records must be {formats.compressed_record_bytes(d)} B wide")
    out = attn_common.alloc(q.shape, q.dtype, q.device)
    return _launch(q, window, FMT_FP8, window_indices, compressed, FMT_FP4, compressed_indices,
                   sink, softmax_scale, out)


# ---------------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------------


def supports_sparse_attention(spec: dict[str, Any]) -> bool:
    """head_dim a power of two in [32, 1024] (the even/odd halves must be powers of two);
    q dtype bf16/fp16/fp32; any head count, row count and list length."""
    d = int(spec.get("head_dim", 512))
    dtype = spec.get("dtype", torch.bfloat16)
    return (cuda_sm90(spec) and 32 <= d <= 1024 and d & (d - 1) == 0
            and dtype in (torch.bfloat16, torch.float16, torch.float32, "bf16", "fp16", "fp32"))


def register_triton_attention() -> None:
    from deepinfer.kernels.reference import attention_fused

    attn_common.register_with_reference("sparse_attention_sink", sparse_attention_sink,
                                        supports_sparse_attention)
    attn_common.register_with_reference("sparse_attention_sink_records",
                                        sparse_attention_sink_records, supports_sparse_attention,
                                        attention_fused.sparse_attention_sink_records)
