"""Sparse MQA attention with a per-head sink at prefill sizes, in Gluon (SM90): the
``sparse_attention_sink`` op (model-spec §2.1, §2.7) over bf16 rows, on wgmmas.

    out[n, h] = sum_j softmax_j(q[n, h] . kv[idx[n, j]] * scale | sink[h]) * kv[idx[n, j]]

(entries idx < 0 are skipped; the sink only adds exp(sink[h]) to the denominator).

Why: the Triton kernel (``attention._sparse_attn_sink_kernel``) ran the 4K prefill's attention
at ~0.2 of the bf16 rate (13.4 ms of the 4K slice prefill in session 17's round 86a).

Work items are (query, block of 64 heads): the wgmma M side (fewer heads: zero rows). One
persistent program per SM walks items program_id, + num_programs, ... It is warp-specialized:

  * A loader warpgroup (``_producer``) copies q [64, D] into shared memory once the math
    warpgroups are past the previous item's last q . k, then the item's row list in chunks of
    BK = 64 rows into a ring of STAGES slots (16-byte cp.async, 16 rows at a time; rows of
    idx < 0 or past the list read nothing: zero-filled). Each thread's copies arrive on the
    slot's "ready" barrier when they land; the next chunk's row ids are loaded a chunk ahead.
    K = V: a slot is both operands.
  * Two math warpgroups (``_consumer``) split every tile by columns. S = q k^T [64, BK]: each
    computes BK / 2 columns over all D channels (no partial sums to exchange); the online
    softmax runs in base 2 (running max, sum, rescaled fp32 accumulator), its row max and sum
    reduced over both. O += P V [64, D]: each owns D / 2 output channels (128 fp32 registers a
    thread at D = 512) and the whole P (bf16 registers, the wgmma A operand). A slot is freed
    ("empty" barrier) once P V is waited; the sink joins the denominator at the end; a query
    with no valid row gets zeros.

Shared memory at D = 512: q 64 KB + 2 slots x 64 KB. On the H200 (session 18, rounds 90-95,
``bench/attention_prefill.py``, 4,096 queries x 640 rows): 1.04-1.2 ms against the Triton
kernel's 2.1 (0.36-0.43 of the bf16 rate). Without the row loads it takes the same time,
without the wgmmas ~0.6 ms: the math warpgroups' chain (q . k, the softmax's cross-warpgroup
reductions, p . v) bounds it. Not faster, and dropped: the math warpgroups issuing the copies
themselves (1.6 ms), BK 32 with 3-4 slots (1.6 ms), each math warpgroup a partition of its own
with the whole S (1.24 ms: q . k twice, register spills); the next chunk's q . k issued behind
this chunk's p . v (1.13 vs 1.08 ms) or FlashAttention-3's order, the next softmax under p . v
(1.27 ms; 1.40-1.45 with BK 32 and 3-4 slots) — session 19, round 98a, code in commit 775d851.
Nsight Compute (round 100a): the tensor pipe at 37 %, L1 / shared at 56 %, L2 at 36 %: no unit
saturated, the chain's latency bounds it.

Since session 44 the engine runs ``attention_prefill_pairs`` (each math warpgroup a chunk of its
own, O's columns split: 0.84 against this kernel's 1.07-1.20 ms at the shape above, H100 round
216); this kernel runs with ``attention.PREFILL_KERNEL = "gl"`` (for comparison), and its
loader helpers serve both.

Shapes: q (N, H, D) bf16, kv (M, D) bf16 rows (contiguous, row stride a multiple of 8), idx
(N, K) int32/int64 (int32 on the device), sink (H,) fp32, out (N, H, D) bf16. Reference:
``reference.attention.sparse_attention_sink``; GPU check: tests/gpu/test_attention_side_gpu.py;
compile gate: tests/kernels/triton/test_attention_prefill_gluon.py.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from deepinfer.kernels.triton.moe_gluon import HAS_GLUON

HEADS = 64  # heads per program: the wgmma M side
BK = 64  # rows per chunk (32 S columns per math warpgroup)
STAGES = 2  # chunks in the ring (q + 2 x 64 KB at D = 512)
NUM_WARPS = 8  # the two math warpgroups (the default partition)
LOADER_THREADS = 128  # the loader warpgroup: one ready arrival per thread and phase
LOADER_REGS = 80  # its registers (setmaxnreg); the math warpgroups take the rest
MAXNREG = 168  # the launch's cap: 12 warps in 64K registers
# one program per SM walking the (query, head block) items (the loader fetches the next item's q
# and rows while the math warpgroups finish an item; 1.04 vs 1.11 ms, round 93a); False: one
# program per item
PERSISTENT = True
# bench only (wrong values): 1 = without row loads (zero-filled slots), 2 = without wgmmas
PROBE = 0
_LOG2E = 1.4426950408889634

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    from deepinfer.kernels.triton.moe_gluon import cta_barrier
    _LOADER_THREADS = gl.constexpr(LOADER_THREADS)
    _LOADER_REGS = gl.constexpr(LOADER_REGS)
    _LOG2E_C = gl.constexpr(_LOG2E)

    @gluon.jit
    def _store_out(acc, m_i, l_i, sink_ptr, out_ptr, n, h0, stride_on, stride_oh, num_heads,
                   D: gl.constexpr, MMA_S: gl.constexpr, MMA_O: gl.constexpr):
        """out[n, h0 + i] = O / (sum + exp(sink - max)) in bf16 (zeros for a query with no
        valid row: O and the sum are 0); heads past num_heads are not stored."""
        HB: gl.constexpr = 64
        hs = h0 + gl.arange(0, HB, layout=gl.SliceLayout(1, MMA_S))
        sink = gl.load(sink_ptr + hs, mask=hs < num_heads, other=0.0) * _LOG2E_C
        m_use = gl.where(m_i == float("-inf"), 0.0, m_i)
        inv = gl.convert_layout(1.0 / (l_i + gl.exp2(sink - m_use)), gl.SliceLayout(1, MMA_O))
        ho = h0 + gl.arange(0, HB, layout=gl.SliceLayout(1, MMA_O))
        co = gl.arange(0, D, layout=gl.SliceLayout(0, MMA_O))
        dst = out_ptr + n * stride_on + ho.to(gl.int64)[:, None] * stride_oh + co[None, :]
        gl.store(dst, (acc * inv[:, None]).to(gl.bfloat16), mask=(ho < num_heads)[:, None])

    @gluon.jit
    def _slice_ids(idx_row, num_idx, r0, CP: gl.constexpr):
        """Row ids idx_row[r0 .. r0 + 16) (-1 past the list) in the copy layout's rows."""
        r = r0 + gl.arange(0, 16, layout=gl.SliceLayout(1, CP))
        return gl.load(idx_row + r, mask=r < num_idx, other=-1)

    @gluon.jit
    def _row_count(counts_ptr, n, num_idx, HAS_COUNTS: gl.constexpr):
        """How many of query n's row-list entries its item reads: all num_idx, or its count
        (``row_counts``: the entries past it are -1 padding) — loader and math warpgroups alike,
        so both run the same cdiv(max(count, 1), BK) chunks."""
        if HAS_COUNTS:
            return gl.minimum(gl.load(counts_ptr + n), num_idx)
        return num_idx

    @gluon.jit
    def _copy_slice(dst, base_ptr, row_stride, ids, cols, CP: gl.constexpr,
                    LOAD: gl.constexpr = True):
        """cp.async of 16 rows (base_ptr + ids * row_stride; ids < 0 read nothing: zeros)
        into dst [16, D]: 16 rows at a time keep the loader's addresses in registers.
        LOAD False (a timing probe): every row reads nothing."""
        ok = (ids >= 0) if LOAD else (ids < -1)
        rows = gl.where(ok, ids, 0).to(gl.int64) * row_stride
        src, m = gl.broadcast(base_ptr + rows[:, None] + cols[None, :], ok[:, None])
        async_copy.async_copy_global_to_shared(dst, src, mask=m)

    @gluon.jit
    def _producer(q_ptr, stride_qn, stride_qh, kv_ptr, stride_kv, idx_ptr, stride_in, num_idx,
                  counts_ptr, HAS_COUNTS: gl.constexpr,
                  num_items, num_heads, q_s, k_s, q_ready, q_empty, ready, empty,
                  D: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                  HBLK: gl.constexpr, PROBE: gl.constexpr):
        """The loader warpgroup, over this program's work items (query n, head block): q once
        the consumers are past the previous item's last q . k, then chunk after chunk into
        the ring (global chunk count g: slot g % STAGES) once the consumers have freed the
        slot, 16 rows at a time. Each thread's copies arrive on the barrier when they land
        (128 arrivals a phase). The next chunk's row ids are loaded one chunk ahead."""
        gl.static_assert(BK == 64 or BK == 32, "four (two) slices of 16 rows a chunk")
        NI2: gl.constexpr = 1 if BK == 64 else 0  # slices 2 and 3 only at BK 64
        TC: gl.constexpr = 32 if D >= 256 else D // 8  # lanes along a row: 16-byte copies
        CP: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TC, TC], [4, 1], [1, 0])
        cols = gl.arange(0, D, layout=gl.SliceLayout(0, CP))
        g = 0
        it = 0
        for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
            n = (item // HBLK).to(gl.int64)
            h0 = (item % HBLK) * 64
            idx_row = idx_ptr + n * stride_in
            cnt = _row_count(counts_ptr, n, num_idx, HAS_COUNTS)
            num_chunks = gl.cdiv(gl.maximum(cnt, 1), BK)
            iv0 = _slice_ids(idx_row, cnt, 0, CP)
            iv1 = _slice_ids(idx_row, cnt, 16, CP)
            iv2 = _slice_ids(idx_row, cnt * NI2, 32, CP)
            iv3 = _slice_ids(idx_row, cnt * NI2, 48, CP)
            mbarrier.wait(q_empty, (it & 1) ^ 1)
            for i in gl.static_range(4):  # q's heads h0 + 16 i .. (past num_heads: zeros)
                hq = h0 + 16 * i + gl.arange(0, 16, layout=gl.SliceLayout(1, CP))
                _copy_slice(q_s.slice(16 * i, 16, dim=0), q_ptr + n * stride_qn, stride_qh,
                            gl.where(hq < num_heads, hq, -1), cols, CP)
            async_copy.mbarrier_arrive(q_ready, increment_count=False)
            for c in range(num_chunks):
                slot = g % STAGES
                r0 = (c + 1) * BK  # the next chunk's ids, loaded while these copies go
                nv0 = _slice_ids(idx_row, cnt, r0, CP)
                nv1 = _slice_ids(idx_row, cnt, r0 + 16, CP)
                nv2 = _slice_ids(idx_row, cnt * NI2, r0 + 32, CP)
                nv3 = _slice_ids(idx_row, cnt * NI2, r0 + 48, CP)
                mbarrier.wait(empty.index(slot), ((g // STAGES) & 1) ^ 1)
                kt = k_s.index(slot)
                _copy_slice(kt.slice(0, 16, dim=0), kv_ptr, stride_kv, iv0, cols, CP,
                            PROBE != 1)
                _copy_slice(kt.slice(16, 16, dim=0), kv_ptr, stride_kv, iv1, cols, CP,
                            PROBE != 1)
                if BK == 64:
                    _copy_slice(kt.slice(32, 16, dim=0), kv_ptr, stride_kv, iv2, cols, CP,
                                PROBE != 1)
                    _copy_slice(kt.slice(48, 16, dim=0), kv_ptr, stride_kv, iv3, cols, CP,
                                PROBE != 1)
                async_copy.mbarrier_arrive(ready.index(slot), increment_count=False)
                iv0, iv1, iv2, iv3 = nv0, nv1, nv2, nv3
                g += 1
            it += 1

    @gluon.jit
    def _chunk_ids(idx_row, num_idx, c, BK: gl.constexpr, MMA_S: gl.constexpr):
        """Chunk c's row ids in S's column layout (-1 past the list): the softmax's mask."""
        cols = c * BK + gl.arange(0, BK, layout=gl.SliceLayout(0, MMA_S))
        return gl.load(idx_row + cols, mask=cols < num_idx, other=-1)

    @gluon.jit
    def _issue_qk(q_s, k_s, ready, g, STAGES: gl.constexpr, HB: gl.constexpr,
                  BK: gl.constexpr, MMA_S: gl.constexpr):
        """S = q k^T of global chunk g (slot g % STAGES) issued once its rows have landed;
        the caller waits for it."""
        slot = g % STAGES
        mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
        fence_async_shared()  # the copies' writes, before the wgmmas read them
        s = gl.zeros([HB, BK], gl.float32, MMA_S)
        return warpgroup_mma(q_s, k_s.index(slot).permute((1, 0)), s, is_async=True)

    @gluon.jit
    def _softmax_chunk(s, iv, m_i, l_i, qk_scale, MMA_O: gl.constexpr):
        """One chunk's online-softmax step in base 2 over S [64, BK] (this warpgroup's
        columns; the row max and sum reduce over both): rows of id < 0 masked, the new max
        and sum, P (fp32) and the accumulator's rescale in its row layout."""
        s = gl.where((iv >= 0)[None, :], s * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, axis=1))
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = gl.exp2(m_i - m_use)
        p = gl.exp2(s - m_use[:, None])
        l_new = l_i * alpha + gl.sum(p, axis=1)
        return p, m_new, l_new, gl.convert_layout(alpha, gl.SliceLayout(1, MMA_O))

    @gluon.jit
    def _release(empty, g, STAGES: gl.constexpr):
        """Both warpgroups' p . v of global chunk g are done: its slot may be refilled."""
        cta_barrier()
        mbarrier.arrive(empty.index(g % STAGES), count=1)

    @gluon.jit
    def _release_q(q_empty):
        """Both warpgroups' last q . k of the item are done: q may be refilled."""
        cta_barrier()
        mbarrier.arrive(q_empty, count=1)

    @gluon.jit
    def _item_chunks(q_s, k_s, ready, empty, q_empty, idx_row, num_idx, qk_scale, acc, m_i,
                     l_i, g, D: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                     PROBE: gl.constexpr, MMA_S: gl.constexpr, MMA_O: gl.constexpr,
                     LP: gl.constexpr):
        """One item's chunks (global chunk count g on): per chunk q . k, softmax, p . v, each
        waited before the next. Returns the accumulator, the row max and sum, and g."""
        HB: gl.constexpr = 64
        num_chunks = gl.cdiv(gl.maximum(num_idx, 1), BK)  # >= 1: q is released in the last
        for c in range(num_chunks):
            iv = _chunk_ids(idx_row, num_idx, c, BK, MMA_S)
            kt = k_s.index(g % STAGES)
            if PROBE != 2:
                s = _issue_qk(q_s, k_s, ready, g, STAGES, HB, BK, MMA_S)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
            else:
                mbarrier.wait(ready.index(g % STAGES), (g // STAGES) & 1)
                s = gl.zeros([HB, BK], gl.float32, MMA_S)
            if c == num_chunks - 1:
                _release_q(q_empty)
            p, m_i, l_i, alpha = _softmax_chunk(s, iv, m_i, l_i, qk_scale, MMA_O)
            acc = acc * alpha[:, None]
            if PROBE != 2:
                acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), LP), kt, acc,
                                    is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            _release(empty, g, STAGES)
            g += 1
        return acc, m_i, l_i, g

    @gluon.jit
    def _consumer(q_s, k_s, q_ready, q_empty, ready, empty, idx_ptr, stride_in, num_idx,
                  counts_ptr, HAS_COUNTS: gl.constexpr,
                  num_items, sink_ptr, out_ptr, stride_on, stride_oh, num_heads, qk_scale,
                  D: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                  HBLK: gl.constexpr, PROBE: gl.constexpr):
        """The two math warpgroups (the default partition), over the same work items: per
        chunk, S = q k^T (each warpgroup BK / 2 of its columns), the online softmax (row max
        and sum over both), O += P V (each D / 2 of its channels, the whole P as the A
        operand); a slot is freed once its P V is waited, q once the item's last q . k is;
        then the item's output, while the loader already fetches the next item."""
        HB: gl.constexpr = 64
        MMA_S: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                         instr_shape=[16, BK // 2, 16])
        MMA_O: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                         instr_shape=[16, D // 2, 16])
        LP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA_O, k_width=2)
        g = 0
        it = 0
        for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
            n = (item // HBLK).to(gl.int64)
            idx_row = idx_ptr + n * stride_in
            m_i = gl.full([HB], float("-inf"), gl.float32, gl.SliceLayout(1, MMA_S))
            l_i = gl.zeros([HB], gl.float32, gl.SliceLayout(1, MMA_S))
            acc = gl.zeros([HB, D], gl.float32, MMA_O)
            mbarrier.wait(q_ready, it & 1)
            cnt = _row_count(counts_ptr, n, num_idx, HAS_COUNTS)
            acc, m_i, l_i, g = _item_chunks(q_s, k_s, ready, empty, q_empty, idx_row, cnt,
                                            qk_scale, acc, m_i, l_i, g, D, BK, STAGES, PROBE,
                                            MMA_S, MMA_O, LP)
            _store_out(acc, m_i, l_i, sink_ptr, out_ptr, n, (item % HBLK) * HB, stride_on,
                       stride_oh, num_heads, D, MMA_S, MMA_O)
            it += 1

    @gluon.jit
    def _attn_prefill_ws_kernel(q_ptr, stride_qn, stride_qh, kv_ptr, stride_kv, idx_ptr,
                                stride_in, num_idx, counts_ptr, sink_ptr, out_ptr, stride_on,
                                stride_oh, num_heads, qk_scale, num_items, D: gl.constexpr,
                                BK: gl.constexpr, STAGES: gl.constexpr, HBLK: gl.constexpr,
                                HAS_COUNTS: gl.constexpr, PROBE: gl.constexpr,
                                num_warps: gl.constexpr):
        """The loader warpgroup (``_producer``) and the two math warpgroups (``_consumer``,
        the default partition) over items program_id, + num_programs, ... of the N x HBLK
        (query, head block) items; one item per program when the grid has them all.
        num_idx > 0; HAS_COUNTS: query n reads only its first counts[n] entries (int32; the
        chunks past them are not run). PROBE (timing only, wrong values): 1 = no row loads,
        2 = no wgmmas."""
        gl.static_assert(num_warps == 8, "two math warpgroups")
        HB: gl.constexpr = 64
        SH: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16,
                                                rank=2)
        q_s = gl.allocate_shared_memory(gl.bfloat16, [HB, D], SH)
        k_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BK, D], SH)
        q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_ready, count=_LOADER_THREADS)
        mbarrier.init(q_empty, count=1)
        for b in gl.static_range(STAGES):
            mbarrier.init(ready.index(b), count=_LOADER_THREADS)
            mbarrier.init(empty.index(b), count=1)
        gl.warp_specialize([
            (_consumer, (q_s, k_s, q_ready, q_empty, ready, empty, idx_ptr, stride_in, num_idx,
                         counts_ptr, HAS_COUNTS, num_items, sink_ptr, out_ptr, stride_on,
                         stride_oh, num_heads, qk_scale, D, BK, STAGES, HBLK, PROBE)),
            (_producer, (q_ptr, stride_qn, stride_qh, kv_ptr, stride_kv, idx_ptr, stride_in,
                         num_idx, counts_ptr, HAS_COUNTS, num_items, num_heads, q_s, k_s,
                         q_ready, q_empty, ready, empty, D, BK, STAGES, HBLK, PROBE)),
        ], [4], [_LOADER_REGS])


def accepts(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor) -> bool:
    """bf16 q (N, H, D) and rows (M, D), D a power of two in 64..512, contiguous channels and
    16-byte aligned rows, on an SM90 GPU with Gluon."""
    d = q.shape[-1]
    return (HAS_GLUON and q.is_cuda and q.dtype == torch.bfloat16 and kv.dtype == torch.bfloat16
            and 64 <= d <= 512 and d & (d - 1) == 0 and kv.shape[-1] == d
            and q.stride(-1) == 1 and kv.stride(-1) == 1 and kv.stride(0) % 8 == 0
            and q.stride(1) % 8 == 0 and q.stride(0) % 8 == 0
            and indices.dtype in (torch.int32, torch.int64)
            and torch.cuda.get_device_capability(q.device)[0] == 9)


def sparse_attention_sink_gl(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor,
                             sink: torch.Tensor, softmax_scale: float, out: torch.Tensor,
                             row_counts: torch.Tensor | None = None) -> torch.Tensor:
    """``attention.sparse_attention_sink`` on this kernel into ``out`` (N, H, D) bf16 (the
    caller has checked ``accepts``); ``row_counts`` (N,): query n's first row_counts[n] entries
    only — its item runs cdiv(count, BK) chunks, not the whole list's (a prompt's picks end in
    -1 padding: at 4K tokens ~10-20 % of the chunks)."""
    n, h, d = q.shape
    if n == 0:
        return out
    assert out.dtype == torch.bfloat16 and out.stride(-1) == 1, out.dtype
    if indices.shape[-1] == 0:  # no rows: the sink alone, a zero output
        return out.zero_()
    # int32 row ids: the loader holds the next chunk's in 16 registers
    indices = indices.to(torch.int32).contiguous()
    counts = indices if row_counts is None else row_counts.to(torch.int32).contiguous()
    hblk = -(-h // HEADS)
    items = n * hblk
    programs = min(items, _sm_count(q.device)) if PERSISTENT else items
    _attn_prefill_ws_kernel[(programs, )](
        q, q.stride(0), q.stride(1), kv, kv.stride(0), indices, indices.stride(0),
        indices.shape[-1], counts, sink.float().contiguous(), out, out.stride(0), out.stride(1),
        h, float(softmax_scale) * _LOG2E, items, D=d, BK=BK, STAGES=STAGES, HBLK=hblk,
        HAS_COUNTS=row_counts is not None, PROBE=PROBE, num_warps=NUM_WARPS, maxnreg=MAXNREG)
    return out


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases: D = 512 (the released head; with and without row counts), 64
    and 128 (tiny configs)."""
    cases = []
    for d, counts in ((512, True), (512, False), (64, True), (128, False)):
        cases.append({
            "id": f"attn_prefill_gl_d{d}" + ("_counts" if counts else ""), "gluon": True,
            "module": __name__,
            "kernel": "_attn_prefill_ws_kernel",
            # the loader keeps a few loop-invariant smem offsets in local memory (L1)
            "maxnreg": MAXNREG, "max_stack": 128,
            "signature": {"q_ptr": "*bf16", "stride_qn": "i32", "stride_qh": "i32",
                          "kv_ptr": "*bf16", "stride_kv": "i32", "idx_ptr": "*i32",
                          "stride_in": "i32", "num_idx": "i32", "counts_ptr": "*i32",
                          "sink_ptr": "*fp32",
                          "out_ptr": "*bf16", "stride_on": "i32", "stride_oh": "i32",
                          "num_heads": "i32", "qk_scale": "fp32", "num_items": "i32"},
            "constexprs": {"D": d, "BK": BK, "STAGES": STAGES, "HBLK": 1, "HAS_COUNTS": counts,
                           "PROBE": 0, "num_warps": NUM_WARPS},
            "num_warps": NUM_WARPS, "num_stages": 1, "no_spill": True, "expect_wgmma": True,
            "divisible": ["stride_qn", "stride_qh", "stride_kv", "stride_in", "stride_on",
                          "stride_oh"]})
    return cases
