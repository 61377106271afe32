"""The indexer's paged scores at decode in Gluon (SM90): ``indexer.index_scores_paged`` with the
key records gathered by cp.async into a shared ring and decoded straight into the wgmma
register-A layout. The default (``indexer.PAGED_KERNEL = "gl"``) since session 16: on the H200
(round 75a) 471 / 240 µs at 256 rows x 32K at ratios 1 / 2 against v2's 534 / 279.

    score[n, t] = sum_h w[n, h] * relu(q[n, h] . key(t))   for t < num_visible[n], else -inf

Why: v2 (Triton) runs at ~0.28 of its roofline at 256 rows x 32K (session 14 round 61a: 532.8 µs
against 149.7), 1.36 ms of a 256 x 32K decode step over its 3 calls (session 15 round 73a). Its
record loads keep one tile in flight, and the decoded keys reach the MMA through a layout
conversion. Here:

  * A program owns query row n and its tiles i = p, p + P, ... of BT = 64 entries (v2's
    strided split, so a row's visible tiles spread over its P programs). Each tile's 64 records
    (68 bytes: 64 bytes of e2m1 pairs, then 4 ue8m0 scale bytes) are gathered through the
    block table by 4-byte cp.async into ring stage i % STAGES, STAGES - 1 tiles ahead. The
    block-table entries come one tile further ahead again, so the copies never wait on them.
  * The pair bytes go from shared memory to registers as one 4-byte word per (row, 32-channel
    group, quad lane q). The MXFP4 PTX of ``mxfp4_unpack`` (two multiplies: exact for every
    scale byte) decodes them to bf16 in place. Those registers are the A fragment of a k32
    bf16 wgmma once the channels are permuted inside each group: A's column v holds channel
    C(v) = v0 + 8 v1 + 16 v2 + 2 v3 + 4 v4 (``channel_permutation``). q is stored to shared
    memory in that order once per program: [HP heads, 128] as the B operand.
  * Per tile: 4 groups x m64 nHP k32 into an fp32 accumulator, then relu, times the head
    weights, summed over heads in the accumulator's layout. The store masks t < num_visible
    (-inf past it). The program's tiles past the visible ones get -inf only.

Shapes: q (N, Hi, 128) bf16 on the FP4 grid; head weights (N, Hi) fp32; key pool (R, 68) uint8
records (``formats.pack_index_key``); block tables (N, MB) int64; num_visible (N,) int64; out
(N, width) fp32. Reference: ``reference.attention_fused.index_scores_paged``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from deepinfer.kernels.triton.host_cache import sm_major
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON

BT = 64  # entries per tile: the wgmma M side (one warpgroup)
D = 128  # channels per head (4 groups of 32): the released index_head_dim
RECORD_BYTES = D // 2 + D // 32  # 68
# tiles in the ring: STAGES - 1 in flight while one is computed; programs over all rows (per row:
# at most one per tile). Round 75a: 3 stages 0-14 % slower, 660 programs 1-10 % slower, 2,048
# ties at 256 x 32K and loses 9-37 % at 4K.
STAGES = 4
TARGET_PROGRAMS = 1024


def channel_permutation() -> torch.Tensor:
    """(32,) int64: the channel inside a 32-channel group held by the A operand's column v,
    C(v) = v0 + 8 v1 + 16 v2 + 2 v3 + 4 v4. The thread of quad lane q decodes the group's
    bytes 4q..4q+3 (channels 8q..8q+7): the PTX gives channel 8q + 2i + t as element i of its
    output t (t: low / high nibble), which the register reshape puts at v = t + 2q + 8 i0 +
    16 i1."""
    v = torch.arange(32)
    return (v & 1) + 8 * ((v >> 1) & 1) + 16 * ((v >> 2) & 1) + 2 * ((v >> 3) & 1) \
        + 4 * ((v >> 4) & 1)


if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    from deepinfer.kernels.triton.moe_gluon import cta_barrier
    from deepinfer.kernels.triton.mxfp4_unpack import E2M1X4_TO_BF16
    _UNPACK = gl.constexpr(E2M1X4_TO_BF16.value)
    BT_ = gl.constexpr(BT)

    @gluon.jit
    def _tile_rows(bt_row, tile, vis, epb, num_tiles, RL: gl.constexpr):
        """Pool rows (int64) of tile ``tile``'s BT entries and which are visible (none past
        the program's last tile)."""
        t = tile * BT_ + gl.arange(0, BT_, layout=RL)
        ok = (t < vis) & (tile < num_tiles)
        blk = gl.load(bt_row + t // epb, mask=ok, other=0)
        return blk * epb + t % epb, ok

    @gluon.jit
    def _issue(k_ptr, pk_s, sc_s, rows, ok, slot, CP: gl.constexpr, SP: gl.constexpr):
        """cp.async of a tile's records into ring slot ``slot``: the pair bytes [BT, 64] (4
        bytes a copy) and the 4 scale bytes of each record as one int32; masked rows read
        nothing (zero-filled). One commit group per tile (empty past the last)."""
        rows_c = gl.convert_layout(rows, gl.SliceLayout(1, CP))
        ok_c = gl.convert_layout(ok, gl.SliceLayout(1, CP))
        cols = gl.arange(0, 64, layout=gl.SliceLayout(0, CP))
        src, m = gl.broadcast(k_ptr + rows_c[:, None] * 68 + cols[None, :], ok_c[:, None])
        async_copy.async_copy_global_to_shared(pk_s.index(slot), src, mask=m)
        rows_s = gl.convert_layout(rows, SP)
        ok_s = gl.convert_layout(ok, SP)
        src_s = (k_ptr + rows_s * 68 + 64).to(gl.pointer_type(gl.int32), bitcast=True)
        async_copy.async_copy_global_to_shared(sc_s.index(slot), src_s, mask=ok_s)
        async_copy.commit_group()

    @gluon.jit
    def _group_operand(pg, scale_word, g: gl.constexpr, PG: gl.constexpr, LA: gl.constexpr):
        """Group g's bytes [BT, 16] (column 4 q + byte) and the rows' scale words (the 4
        groups' bytes; SliceLayout(1, PG)) -> the decoded A operand [BT, 32] bf16 (LA), column
        v = channel 32 g + C(v)."""
        pg = gl.convert_layout(pg, PG)  # the same registers
        e = (scale_word >> (8 * g)) & 0xFF
        sbits = gl.where(e == 0, 0x40, e << 7).to(gl.int16).to(gl.bfloat16, bitcast=True)
        pg, s4 = gl.broadcast(pg, sbits[:, None])
        lo, hi = gl.inline_asm_elementwise(_UNPACK, "=r,=r,=r,=r,r,r,r", [pg, s4],
                                           dtype=(gl.bfloat16, gl.bfloat16), is_pure=True,
                                           pack=4)
        # (row, q1, q0, i1, i0, t) -> v = t + 2 q0 + 4 q1 + 8 i0 + 16 i1
        t = gl.reshape(gl.join(lo, hi), [BT_, 2, 2, 2, 2, 2])
        t = gl.reshape(gl.permute(t, [0, 3, 4, 1, 2, 5]), [BT_, 32])
        return gl.convert_layout(t, LA)

    @gluon.jit
    def _tile_scores(pk_s, sc_s, slot, qa_s, qb_s, w, L64: gl.constexpr, PG: gl.constexpr,
                     MMA: gl.constexpr, LA: gl.constexpr, HP: gl.constexpr):
        """Scores [BT] (SliceLayout(1, MMA)) of the tile in ring slot ``slot``."""
        p = pk_s.index(slot).load(L64)  # bytes 16 G + 4 q + i of each record
        sw = sc_s.index(slot).load(gl.SliceLayout(1, PG))
        p = gl.reshape(gl.permute(gl.reshape(p, [BT_, 4, 4, 4]), [0, 2, 3, 1]),
                       [BT_, 16, 2, 2])  # (row, q, i, G1, G0)
        p_even, p_odd = gl.split(p)
        p0, p2 = gl.split(p_even)
        p1, p3 = gl.split(p_odd)
        acc = gl.zeros([BT_, HP], gl.float32, MMA)
        acc = warpgroup_mma(_group_operand(p0, sw, 0, PG, LA),
                            qa_s.slice(0, 32, dim=1).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma(_group_operand(p1, sw, 1, PG, LA),
                            qa_s.slice(32, 32, dim=1).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma(_group_operand(p2, sw, 2, PG, LA),
                            qb_s.slice(0, 32, dim=1).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma(_group_operand(p3, sw, 3, PG, LA),
                            qb_s.slice(32, 32, dim=1).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        return gl.sum(gl.maximum(acc, 0.0) * w[None, :], axis=1)

    @gluon.jit(do_not_specialize=["epb"])
    def _index_scores_paged_gl_kernel(q_ptr, stride_qn, stride_qh, w_ptr, stride_wn, k_ptr,
                                      bt_ptr, stride_bn, vis_ptr, out_ptr, stride_on, width,
                                      epb, HI: gl.constexpr, HP: gl.constexpr,
                                      STAGES: gl.constexpr, L64: gl.constexpr,
                                      PG: gl.constexpr, num_warps: gl.constexpr):
        gl.static_assert(num_warps == 4, "one warpgroup per program")
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HP, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        RL: gl.constexpr = gl.SliceLayout(1, MMA)  # the tile's entries, as the scores hold them
        CP: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])  # copies of 4 B
        SP: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        QL: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        FL: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        n = gl.program_id(0).to(gl.int64)
        p = gl.program_id(1)
        num_p = gl.num_programs(1)
        vis = gl.minimum(gl.load(vis_ptr + n), width).to(gl.int32)
        vis_tiles = gl.cdiv(vis, BT_)
        out_row = out_ptr + n * stride_on
        # -inf over this program's tiles past the visible ones (v2's split)
        first_inf = vis_tiles + (p - vis_tiles % num_p + num_p) % num_p
        for i in range(first_inf, gl.cdiv(width, BT_), num_p):
            t = i * BT_ + gl.arange(0, BT_, layout=FL)
            gl.store(out_row + t, gl.full([BT_], float("-inf"), gl.float32, FL), mask=t < width)
        if p < vis_tiles:
            num_mine = gl.cdiv(vis_tiles - p, num_p)  # tiles p, p + P, ... below vis_tiles
            # q^T as the B operand: heads padded to HP with zeros, channels permuted inside
            # each group (column 32 g + v = channel 32 g + C(v)), two [HP, 64] halves
            h = gl.arange(0, HP, layout=gl.SliceLayout(1, QL))
            c = gl.arange(0, 128, layout=gl.SliceLayout(0, QL))
            v = c % 32
            src = (c - v) + (v & 1) + 8 * ((v >> 1) & 1) + 16 * ((v >> 2) & 1) \
                + 2 * ((v >> 3) & 1) + 4 * ((v >> 4) & 1)
            qv = gl.load(q_ptr + n * stride_qn + h[:, None] * stride_qh + src[None, :],
                         mask=(h < HI)[:, None], other=0.0)
            q0, q1 = gl.split(gl.permute(gl.reshape(qv, [HP, 2, 64]), [0, 2, 1]))
            QS: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128,
                                                     element_bitwidth=16, rank=2)
            qa_s = gl.allocate_shared_memory(gl.bfloat16, [HP, 64], QS, q0)
            qb_s = gl.allocate_shared_memory(gl.bfloat16, [HP, 64], QS, q1)
            hw = gl.arange(0, HP, layout=gl.SliceLayout(0, MMA))
            w = gl.load(w_ptr + n * stride_wn + hw, mask=hw < HI, other=0.0)

            RS: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
            pk_s = gl.allocate_shared_memory(gl.uint8, [STAGES, BT_, 64], RS)
            sc_s = gl.allocate_shared_memory(gl.int32, [STAGES, BT_],
                                             gl.SwizzledSharedLayout(1, 1, 1, [0]))
            bt_row = bt_ptr + n * stride_bn
            # tiles k = 0 .. STAGES - 2 in flight, tile STAGES - 1's block-table rows loaded
            for k in gl.static_range(STAGES - 1):
                rows, ok = _tile_rows(bt_row, p + k * num_p, vis, epb, p + num_mine * num_p,
                                      RL)
                _issue(k_ptr, pk_s, sc_s, rows, ok, k, CP, SP)
            rows_n, ok_n = _tile_rows(bt_row, p + (STAGES - 1) * num_p, vis, epb,
                                      p + num_mine * num_p, RL)
            fence_async_shared()
            for k in range(num_mine):
                # every warp is past tile k - 1 (its slot, (k - 1) % STAGES, is free)
                cta_barrier()
                _issue(k_ptr, pk_s, sc_s, rows_n, ok_n, (k + STAGES - 1) % STAGES, CP, SP)
                rows_n, ok_n = _tile_rows(bt_row, p + (k + STAGES) * num_p, vis, epb,
                                          p + num_mine * num_p, RL)
                async_copy.wait_group(STAGES - 1)  # tile k's group (this thread's copies)
                cta_barrier()  # ... and every thread's
                score = _tile_scores(pk_s, sc_s, k % STAGES, qa_s, qb_s, w, L64, PG, MMA, LA,
                                     HP)
                t = (p + k * num_p) * BT_ + gl.arange(0, BT_, layout=RL)
                gl.store(out_row + t, gl.where(t < vis, score, float("-inf")), mask=t < width)
            async_copy.wait_group(0)


@functools.cache
def byte_layout():
    """A tile's pair bytes [BT, 64] in registers: bytes i (2 bits) of quad lane q's word, row
    + 8, group G (2 bits: bytes 16 G + 4 q + i); lanes q and g; warps 16 rows each (lists of
    lists, built on the host: linear_wide's ``operand_layout``)."""
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0], [0, 16], [0, 32]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[BT, 64])


@functools.cache
def group_layout():
    """One group's bytes [BT, 16] (column 4 q + i) as ``byte_layout`` holds them."""
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[BT, 16])


def heads_padded(hi: int) -> int:
    """The wgmma N side: the index heads padded to a power of two, at least 16."""
    return max(16, next_power_of_2(hi))


def programs_per_row(n: int, width: int) -> int:
    """Programs per query row: ``TARGET_PROGRAMS`` over all rows, at most one per tile of the
    row (shape-only: the same grid for every visible count, as CUDA graphs need)."""
    return max(1, min(cdiv(TARGET_PROGRAMS, n), cdiv(width, BT)))


def accepts(q: torch.Tensor) -> bool:
    """bf16 q with 128 channels and at most 64 heads, on an SM90 GPU with Gluon."""
    return (HAS_GLUON and q.is_cuda and q.dtype == torch.bfloat16 and q.shape[-1] == D
            and q.shape[1] <= 64 and sm_major(q.device) == 9)


def index_scores_paged_gl(q: torch.Tensor, head_weights: torch.Tensor, key_pool: torch.Tensor,
                          block_tables: torch.Tensor, num_visible: torch.Tensor,
                          entries_per_block: int, width: int, out: torch.Tensor) -> None:
    """``indexer.index_scores_paged`` on this kernel into ``out`` (N, width) fp32; the caller
    has checked the inputs (contiguous rows, 68-byte records) and that ``accepts(q)``."""
    n, hi, _ = q.shape
    hp = heads_padded(hi)
    _index_scores_paged_gl_kernel[(n, programs_per_row(n, width))](
        q, q.stride(0), q.stride(1), head_weights, head_weights.stride(0), key_pool,
        block_tables, block_tables.stride(0), num_visible.contiguous(), out, out.stride(0),
        width, entries_per_block, HI=hi, HP=hp, STAGES=STAGES, L64=byte_layout(),
        PG=group_layout(), num_warps=4)


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases: 32 and 64 index heads."""
    cases = []
    for hi in (32, 64):
        cases.append({
            "id": f"index_paged_gl_h{hi}", "gluon": True, "module": __name__,
            "kernel": "_index_scores_paged_gl_kernel",
            "signature": {"q_ptr": "*bf16", "stride_qn": "i32", "stride_qh": "i32",
                          "w_ptr": "*fp32", "stride_wn": "i32", "k_ptr": "*u8",
                          "bt_ptr": "*i64", "stride_bn": "i32", "vis_ptr": "*i64",
                          "out_ptr": "*fp32", "stride_on": "i32", "width": "i32",
                          "epb": "i32"},
            "constexprs": {"HI": hi, "HP": heads_padded(hi), "STAGES": STAGES,
                           "L64": {"call": "byte_layout", "args": []},
                           "PG": {"call": "group_layout", "args": []}, "num_warps": 4},
            "num_warps": 4, "num_stages": 1, "no_spill": True, "expect_wgmma": True,
            "divisible": ["stride_qn", "stride_qh", "stride_wn", "stride_on"]})
    return cases
