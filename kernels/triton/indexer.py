"""Indexer scores ``score[n, t] = sum_h w[n, h] * relu(q[n, h] . k[t])`` (model-spec §2.6).

``index_scores`` (the prefill: a prompt's queries over one sequence's index keys unpacked to
float rows, with the visibility rule ``t < num_visible[n]`` applied: -inf elsewhere) runs the
keys-on-M kernel of ``index_scores_keys_m``. ``index_scores_paged`` scores each query over its
own entries of a paged pool of 68-B FP4 index-key records (D/2 e2m1 pair bytes | D/32 ue8m0
scales; rows do not share keys), reading only visible entries. Its decode kernel v2
(``PAGED_KERNEL``) unpacks a record tile with the MXFP4 PTX of ``mxfp4_unpack`` (the record is
an MXFP4 row: byte j = channels 2j, 2j+1; scale byte b = channels 32b..32b+31) straight into
bf16 even/odd halves that are the MMA's A operand (keys on M, q^T the B operand loaded once per
program), spreads a row's tiles over its programs by stride, and keeps the next tile's loads in
flight. Dots run in q's dtype (bf16 on the GPU: FP4-grid values are exact in bf16) with fp32
accumulation; the head reduction is fp32.

The rows kernel (``FLOAT_KERNEL`` "rows", also behind the unused Triton ``index_scores_records``)
and paged kernel v1 were removed in session 42 (measured slower: 0.283 -> 0.134 ms and 74.8 ->
42.6 µs against their successors), code at commit ad9ad7b.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels import formats
from deepinfer.kernels.triton import attn_common, index_scores_keys_m, mxfp4_unpack
from deepinfer.kernels.triton.attn_common import cuda_sm90, ue8m0_to_f32
from deepinfer.kernels.triton.gemm_fp8 import is_interpreting
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2

# index_scores_paged (decode): "v2" = _index_scores_paged_v2_kernel (records unpacked by the
# MXFP4 PTX of mxfp4_unpack, keys on the MMA's M side, tiles strided over a row's programs,
# next tile's loads in flight). (v1, one row per program, was removed in session 42 (measured
# slower: 74.8 -> 42.6 µs at 64 rows x 4,096), code at commit ad9ad7b. A "v3"
# leaving the record loads to Triton's software pipeline, cp.async with 3-4 tiles in flight,
# was 5-14 % slower than v2 at every decode shape: session 14 round 61a; commit 974b483 has it.)
# "gl" = index_paged_gluon (Gluon: records by cp.async into a 4-deep ring, decoded into the
# wgmma A layout) where it accepts the call (bf16 q, 128 channels, <= 64 heads, SM90), v2
# otherwise (the CPU, the interpreter). H200 (session 16 round 75a), 256 rows x 32K at ratios
# 1 / 2: gl 471 / 240 µs against v2's 534 / 279; decode 256 x 32K 24.42 -> 24.00 ms (75b).
PAGED_KERNEL = "gl"
# v2 tiling: keys per tile, total programs aimed at (programs per row = cdiv(this, rows),
# capped by the row's tiles), warps; bench/index_decode.py --variants compares others.
PAGED_BLOCK_KEYS = 128
PAGED_TARGET_PROGRAMS = 1024
PAGED_NUM_WARPS = 4


@triton.jit
def _paged_rows(bt_row, t, tmask, entries_per_block):
    """Pool rows (int64) of entries t of one block-table row; 0 where masked."""
    blk = tl.load(bt_row + t // entries_per_block, mask=tmask, other=0)
    return blk * entries_per_block + t % entries_per_block


@triton.jit
def _paged_records(k_ptr, rows, tmask, D: tl.constexpr):
    """Packed e2m1 pair bytes [BT, D/2] and ue8m0 scale bytes [BT, D/32] (int32) of pool rows."""
    k_rows = k_ptr + rows.to(tl.int64)[:, None] * (D // 2 + D // 32)
    pk = tl.load(k_rows + tl.arange(0, D // 2)[None, :], mask=tmask[:, None], other=0)
    e = tl.load(k_rows + D // 2 + tl.arange(0, D // 32)[None, :], mask=tmask[:, None], other=0)
    return pk, e.to(tl.int32)


@triton.jit
def _record_halves(pk, e, ASM: tl.constexpr, BT: tl.constexpr, D: tl.constexpr):
    """Records [BT] as exactly scaled (even, odd) channel halves [BT, D/2]: bf16 from
    ``mxfp4_unpack.E2M1X4_TO_BF16`` (two multiplies: exact for every scale byte) on the GPU,
    the fp32 twin of the same bits otherwise. The scale is built per 32-channel block, then
    broadcast (not per element)."""
    NB: tl.constexpr = D // 32
    if ASM:
        s = tl.where(e == 0, 0x40, e << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)
        s16 = tl.reshape(tl.broadcast_to(s[:, :, None], (BT, NB, 16)), (BT, D // 2))
        even, odd = tl.inline_asm_elementwise(
            mxfp4_unpack.E2M1X4_TO_BF16, "=r,=r,=r,=r,r,r,r", [pk, s16],
            dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
    else:
        scale = ue8m0_to_f32(e)
        scale = tl.reshape(tl.broadcast_to(scale[:, :, None], (BT, NB, 16)), (BT, D // 2))
        b = pk.to(tl.int32)
        even = (((b & 0x7) << 22) | ((b & 0x8) << 28)).to(tl.float32, bitcast=True)
        odd = (((b & 0x70) << 18) | ((b & 0x80) << 24)).to(tl.float32, bitcast=True)
        even = even * 2.0**126 * scale
        odd = odd * 2.0**126 * scale
    return even, odd


@triton.jit
def _paged_row_start(vis_ptr, out_ptr, stride_on, width, BT: tl.constexpr):
    """Program (n, p) of P = grid[1]: its row n, p, P, the row's visible count and tiles, its
    score row; stores -inf over this program's tiles past the visible ones (the first tile >=
    vis_tiles that is p mod P, then every P-th)."""
    n = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1)
    num_p = tl.num_programs(1)
    vis = tl.minimum(tl.load(vis_ptr + n), width).to(tl.int32)
    vis_tiles = tl.cdiv(vis, BT)
    out_row = out_ptr + n * stride_on
    first_inf = vis_tiles + (p - vis_tiles % num_p + num_p) % num_p
    for i in range(first_inf, tl.cdiv(width, BT), num_p):
        t = i * BT + tl.arange(0, BT)
        tl.store(out_row + t, tl.full((BT,), float("-inf"), tl.float32), mask=t < width)
    return n, p, num_p, vis, vis_tiles, out_row


@triton.jit
def _paged_queries(q_ptr, stride_qn, stride_qh, w_ptr, stride_wn, n, HI: tl.constexpr,
                   HP: tl.constexpr, D: tl.constexpr, F32: tl.constexpr):
    """Row n's queries as the dots' B operands, even / odd channels [D/2, HP] (heads padded to
    HP with zeros), and its head weights [HP] fp32."""
    h = tl.arange(0, HP)  # heads, padded to the 16 columns tl.dot needs
    hmask = h < HI
    j = tl.arange(0, D // 2)
    q_rows = q_ptr + n * stride_qn + h[:, None] * stride_qh
    q_e = tl.load(q_rows + 2 * j[None, :], mask=hmask[:, None], other=0.0)
    q_o = tl.load(q_rows + 2 * j[None, :] + 1, mask=hmask[:, None], other=0.0)
    if F32:
        q_e = q_e.to(tl.float32)
        q_o = q_o.to(tl.float32)
    w = tl.load(w_ptr + n * stride_wn + h, mask=hmask, other=0.0).to(tl.float32)
    return tl.trans(q_e), tl.trans(q_o), w


@triton.jit
def _paged_tile_scores(pk, e, q_e, q_o, w, ASM: tl.constexpr, BT: tl.constexpr,
                       D: tl.constexpr, PREC: tl.constexpr):
    """Scores [BT] of one record tile: the unpacked halves (the MMA's A operand, keys on M) @
    q^T, relu, times the head weights, summed over heads."""
    k_e, k_o = _record_halves(pk, e, ASM, BT, D)
    s = tl.dot(k_e.to(q_e.dtype), q_e, input_precision=PREC)
    s = tl.dot(k_o.to(q_e.dtype), q_o, s, input_precision=PREC)  # (BT, HP)
    return tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1)


@triton.jit(do_not_specialize=["entries_per_block"])
def _index_scores_paged_v2_kernel(
    q_ptr, stride_qn, stride_qh, w_ptr, stride_wn, k_ptr, bt_ptr, stride_bn, vis_ptr, out_ptr,
    stride_on, width, entries_per_block,
    HI: tl.constexpr, HP: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, ASM: tl.constexpr,
    F32: tl.constexpr, PREC: tl.constexpr,
):
    """Program (n, p) of P = grid[1]: query row n over its tiles i = p, p + P, p + 2P, ... of BT
    entries (strided, so a row's visible tiles spread over all P programs whatever its count).
    Visible tiles: records unpacked to bf16 halves in registers (the MMA's A operand, keys on M:
    s^T [BT, HP] = k_even @ q_even^T + k_odd @ q_odd^T, q^T as B loaded once), relu, times the
    head weights, summed over heads; the next tile's records and the one after's block-table
    entries are loaded before the current tile is computed. Tiles past num_visible: -inf only.
    F32: q upcast to fp32 (the interpreter, or fp32 q with "ieee" dots)."""
    n, p, num_p, vis, vis_tiles, out_row = _paged_row_start(vis_ptr, out_ptr, stride_on, width,
                                                            BT)
    if p < vis_tiles:
        q_e, q_o, w = _paged_queries(q_ptr, stride_qn, stride_qh, w_ptr, stride_wn, n, HI, HP,
                                     D, F32)
        bt_row = bt_ptr + n * stride_bn
        tk = tl.arange(0, BT)
        t = p * BT + tk
        tmask = t < vis
        pk, e = _paged_records(k_ptr, _paged_rows(bt_row, t, tmask, entries_per_block),
                               tmask, D)
        t_next = t + num_p * BT
        rows_next = _paged_rows(bt_row, t_next, t_next < vis, entries_per_block)
        for i in range(p, vis_tiles, num_p):
            t = i * BT + tk
            tmask = t < vis
            # in flight while this tile is computed: tile i + P's records, i + 2P's blocks
            t_next = t + num_p * BT
            nmask = t_next < vis
            pk_next, e_next = _paged_records(k_ptr, rows_next, nmask, D)
            t_after = t_next + num_p * BT
            rows_next = _paged_rows(bt_row, t_after, t_after < vis, entries_per_block)
            score = _paged_tile_scores(pk, e, q_e, q_o, w, ASM, BT, D, PREC)
            tl.store(out_row + t, tl.where(tmask, score, float("-inf")), mask=t < width)
            pk = pk_next
            e = e_next


def index_scores(q: torch.Tensor, head_weights: torch.Tensor, keys: torch.Tensor,
                 num_visible: torch.Tensor | None = None) -> torch.Tensor:
    """Triton version of ``reference.indexer.index_scores``: (N, Hi, Di), (N, Hi), (T, Di)
    -> (N, T) fp32 on ``index_scores_keys_m``; ``num_visible`` (N,): -inf at t >=
    num_visible[n], and a program whose queries see none of a key tile writes its -inf without
    scoring it."""
    n = q.shape[0]
    num_keys = keys.shape[0]
    out = attn_common.alloc((n, num_keys), torch.float32, q.device)
    if n == 0 or num_keys == 0:
        return out
    if q.stride(-1) != 1 or head_weights.stride(-1) != 1 or keys.stride(-1) != 1:
        raise ValueError("index scores: q, head weights and keys must be contiguous rows")
    return index_scores_keys_m.index_scores(q, head_weights, keys, out, num_visible)


def paged_launch_meta(hi: int, d: int, q_dtype: torch.dtype = torch.bfloat16
                      ) -> dict[str, Any]:
    """Constexprs and launch options of the paged kernel v2, shared with the SM90 compile
    test. v2 unpacks records with the PTX (ASM) when q is bf16 on the GPU; otherwise
    (interpreter, fp32 or fp16 q) the fp32 twin."""
    hp = max(16, next_power_of_2(hi))
    f32 = is_interpreting() or q_dtype == torch.float32
    return dict(HI=hi, HP=hp, D=d, BT=PAGED_BLOCK_KEYS,
                ASM=q_dtype == torch.bfloat16 and not is_interpreting(), F32=f32,
                PREC="ieee" if f32 else "tf32", num_warps=PAGED_NUM_WARPS, num_stages=1)


def paged_programs_per_row(n: int, width: int, block_keys: int) -> int:
    """v2's programs per query row: ``PAGED_TARGET_PROGRAMS`` over all rows, at most one per
    tile of the row (shape-only: the same grid for every visible count, as CUDA graphs need)."""
    return max(1, min(cdiv(PAGED_TARGET_PROGRAMS, n), cdiv(width, block_keys)))


def index_scores_paged(q: torch.Tensor, head_weights: torch.Tensor, key_pool: torch.Tensor,
                       block_tables: torch.Tensor, num_visible: torch.Tensor,
                       entries_per_block: int, width: int) -> torch.Tensor:
    """Triton version of ``reference.attention_fused.index_scores_paged``: (N, Hi, Di) queries,
    each over its own entries t < num_visible[n] of a paged pool of 68-B records (pool row
    ``block_tables[n, t // entries_per_block] * entries_per_block + t % entries_per_block``)
    -> (N, width) fp32, -inf past each row's visible count. ``PAGED_KERNEL`` picks the kernel."""
    n, hi, d = q.shape
    rec_bytes = formats.index_key_record_bytes(d)
    if key_pool.dim() != 2 or key_pool.shape[-1] != rec_bytes:
        raise ValueError("index key pool does not match the query head dim")
    if key_pool.shape[0] > 0 and key_pool.stride() != (rec_bytes, 1):
        raise ValueError("index key pool must be contiguous records")
    if q.stride(-1) != 1 or head_weights.stride(-1) != 1 or block_tables.stride(-1) != 1:
        raise ValueError("index scores: q, head weights and block tables must be contiguous rows")
    out = attn_common.alloc((n, width), torch.float32, q.device)
    if n == 0 or width == 0:
        return out
    if block_tables.shape[1] == 0 or key_pool.shape[0] == 0:
        return out.fill_(float("-inf"))  # nothing can be visible
    if PAGED_KERNEL == "gl":
        from deepinfer.kernels.triton import index_paged_gluon

        if index_paged_gluon.accepts(q):
            index_paged_gluon.index_scores_paged_gl(q, head_weights, key_pool, block_tables,
                                                    num_visible, entries_per_block, width, out)
            return out
    meta = paged_launch_meta(hi, d, q.dtype)
    grid = (n, paged_programs_per_row(n, width, meta["BT"]))
    _index_scores_paged_v2_kernel[grid](
        q, q.stride(0), q.stride(1), head_weights, head_weights.stride(0), key_pool,
        block_tables, block_tables.stride(0), num_visible.contiguous(), out, out.stride(0),
        width, entries_per_block, **meta,
    )
    return out


def supports_index_scores(spec: dict[str, Any]) -> bool:
    """index head_dim a power of two in [32, 256]; index heads a power of two <= 64."""
    d = int(spec.get("index_head_dim", 128))
    hi = int(spec.get("index_n_heads", 32))
    return (cuda_sm90(spec) and 32 <= d <= 256 and d & (d - 1) == 0 and 1 <= hi <= 64
            and hi & (hi - 1) == 0)


def aot_cases() -> list[dict[str, Any]]:
    types = {"q_ptr": "*bf16", "w_ptr": "*fp32", "k_ptr": "*u8", "bt_ptr": "*i64",
             "vis_ptr": "*i64", "out_ptr": "*fp32"}
    return [
        dict(name="index_scores_paged v2 Hi64 D128", module=__name__,
             kernel="_index_scores_paged_v2_kernel", types=types,
             meta=dict(paged_launch_meta(64, 128), ASM=True, F32=False, PREC="tf32")),
    ] + index_scores_keys_m.aot_cases()


def register_triton_indexer() -> None:
    from deepinfer.kernels.reference import attention_fused

    attn_common.register_with_reference("index_scores", index_scores, supports_index_scores)
    attn_common.register_with_reference("index_scores_paged", index_scores_paged,
                                        supports_index_scores,
                                        attention_fused.index_scores_paged)
