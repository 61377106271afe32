"""Sparse MQA attention with a per-head sink at prefill sizes, in Gluon (SM90): the
``sparse_attention_sink`` op (model-spec §2.1, §2.7) over bf16 rows, on wgmmas, with the two
math warpgroups on chunks of their own.

    out[n, h] = sum_j softmax_j(q[n, h] . kv[idx[n, j]] * scale | sink[h]) * kv[idx[n, j]]

(entries idx < 0 are skipped; the sink only adds exp(sink[h]) to the denominator).

Work items are (query, block of 64 heads): the wgmma M side (fewer heads: zero rows). One
persistent program per SM walks items program_id, + num_programs, ...

Why this schedule: the kernel before it (``attention_prefill_gluon``, session 18; code at
commit 29ce34a) split every chunk's S and O by columns over its two math warpgroups, so both
ran each chunk's q . k, softmax and p . v in lockstep (a CTA barrier for every cross-warpgroup
max, sum and P): the tensor pipe idled through every softmax (Nsight Compute, round 100a:
tensor 37 %, no unit saturated), and each warpgroup's q . k was an m64n32 wgmma that read q's
64-row A tile per 32 columns (shared-memory bound). Here (the schedule DeepSeek's FlashMLA uses
for its sparse prefill on SM90, written anew in Gluon):

  * chunks of BK = 64 rows go in pairs: warpgroup 0 (the default partition) takes the even
    chunk a = 2 j, warpgroup 1 (a worker partition) the odd chunk b = 2 j + 1; each computes
    its own S = q k^T [64, 64] over all D channels (an m64n64 wgmma: half the A reads a column
    of the split's) and owns D / 2 output channels of O (warpgroup 0 the first half);
  * warpgroup 0's softmax runs first: m0 = max(m, rowmax S_a) (m: the running max, both
    warpgroups hold it), P_a = exp2(S_a - m0), O_0 *= exp2(m - m0); it hands m0 over (shared
    memory, an mbarrier) and issues O_0 += P_a V_a[:, :D/2] from registers;
  * warpgroup 1 then m1 = max(m0, rowmax S_b), P_b = exp2(S_b - m1), O_1 *= exp2(m - m1);
    hands m1 over, issues O_1 += P_b V_b[:, D/2:], stores P_b (bf16) for warpgroup 0;
  * warpgroup 0 rescales P_a by exp2(m0 - m1), stores it for warpgroup 1, rescales O_0 and its
    sum, and adds P_b V_b[:, :D/2] (A from shared memory); warpgroup 1 adds P_a V_a[:, D/2:].

So one warpgroup's softmax runs beside the other's wgmmas, and the only lockstep is the max
handed along the pair. Each warpgroup sums its own P's exp values (relative to the common
max); the two sums meet at the item's end. Entries idx < 0 are masked (a chunk of none: S all
-inf, P zero — a pair's odd chunk past the list is such a chunk).

A loader warpgroup (``_loader``) fills four half-chunk buffers — [BK rows, D / 2 channels]:
a's first and second half, b's first and second half — each with its own "ready" and "empty"
barrier, in the order they free: a's first half (warpgroup 0's q . k and p . v), b's second
(warpgroup 1's), then a's second (also read by warpgroup 1's second p . v) and b's first. q
[64, D] is loaded as two halves once the item's last q . k of both warpgroups is done. Rows
are gathered by cp.async (16-byte copies; 8-byte at D = 64), 16 rows at a time; a row id < 0
reads nothing (zeros). ``row_counts`` (session 31): query n reads only its first counts[n]
entries (a prompt's picks end in -1 padding), its item runs only the pairs up to its count.

Shared memory at D = 512: q 64 KB + four half-chunks of 32 KB + two P tiles of 8 KB = 208 KB.
H100 (round 216, ``bench/attention_prefill.py``, 4,096 queries x 640 rows): 0.834-0.839 ms,
0.54 of the measured bf16 ceiling (the split kernel: 1.07-1.20 ms, 0.37-0.42).

Shapes: q (N, H, D) bf16, kv (M, D) bf16 rows (contiguous, row stride a multiple of 8), idx
(N, K) int32/int64 (int32 on the device), sink (H,) fp32, out (N, H, D) bf16. Reference:
``reference.attention.sparse_attention_sink``; GPU check: tests/gpu/test_attention_side_gpu.py;
compile gate: tests/kernels/triton/test_attention_prefill_pairs.py; the schedule as a torch model
on the CPU: tests/kernels/triton/test_attention_pairs_schedule.py.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from deepinfer.kernels.triton.host_cache import sm_major
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON

HEADS = 64  # heads per item: the wgmma M side
BK = 64  # rows per chunk: one warpgroup's S columns
LOADER_REGS = 80  # the loader warpgroup's registers (setmaxnreg)
MATH_REGS = 216  # warpgroup 1's (warpgroup 0, the default partition, gets the rest: 216)
MAXNREG = 168  # the launch's cap: 12 warps in 64K registers (setmaxnreg moves them)
# the smallest head the engine sends here: heads of 64 channels (tiny configs; 8-byte row copies)
# pass the GPU checks since session 45 (H100 round 222: 1.8e-3 / 2.0e-3 against the reference
# at 64 x 300 and 8 x 100 rows)
MIN_HEAD_DIM = 64
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

    _LOADER_THREADS = gl.constexpr(128)
    _BK = gl.constexpr(BK)
    _MATH_REGS = gl.constexpr(MATH_REGS)
    _LOADER_REGS = gl.constexpr(LOADER_REGS)
    _LOG2E_C = gl.constexpr(_LOG2E)

    @gluon.jit
    def _slice_ids(idx_row, num_idx, r0, CP: gl.constexpr):
        """Row ids idx_row[r0 .. r0 + 16) (-1 past the list) in the copy layout's rows."""
        r = r0 + gl.arange(0, 16, layout=gl.SliceLayout(1, CP))
        return gl.load(idx_row + r, mask=r < num_idx, other=-1)

    @gluon.jit
    def _row_count(counts_ptr, n, num_idx, HAS_COUNTS: gl.constexpr):
        """How many of query n's row-list entries its item reads: all num_idx, or its count
        (``row_counts``: the entries past it are -1 padding) — loader and math warpgroups
        alike, so both run the same pairs."""
        if HAS_COUNTS:
            return gl.minimum(gl.load(counts_ptr + n), num_idx)
        return num_idx

    @gluon.jit
    def _copy_slice(dst, base_ptr, row_stride, ids, cols, CP: gl.constexpr):
        """cp.async of 16 rows (base_ptr + ids * row_stride; ids < 0 read nothing: zeros)
        into dst [16, cols]: 16 rows at a time keep the loader's addresses in registers."""
        ok = ids >= 0
        rows = gl.where(ok, ids, 0).to(gl.int64) * row_stride
        src, m = gl.broadcast(base_ptr + rows[:, None] + cols[None, :], ok[:, None])
        async_copy.async_copy_global_to_shared(dst, src, mask=m)

    @gluon.jit
    def _fill_half(dst, kv_ptr, stride_kv, i0, i1, i2, i3, cols, CP: gl.constexpr):
        """Rows i0 .. i3 (16 ids each; < 0: zeros) of kv's channels ``cols`` into dst [64,
        D / 2], 16 rows a copy."""
        _copy_slice(dst.slice(0, 16, dim=0), kv_ptr, stride_kv, i0, cols, CP)
        _copy_slice(dst.slice(16, 16, dim=0), kv_ptr, stride_kv, i1, cols, CP)
        _copy_slice(dst.slice(32, 16, dim=0), kv_ptr, stride_kv, i2, cols, CP)
        _copy_slice(dst.slice(48, 16, dim=0), kv_ptr, stride_kv, i3, cols, CP)

    @gluon.jit
    def _signal(bar):
        """This warpgroup's shared-memory writes (and waited wgmmas) are done: arrive once."""
        cta_barrier()
        mbarrier.arrive(bar, count=1)

    @gluon.jit
    def _put_ids(dst, bar, i0, i1, i2, i3):
        """A chunk's 64 row ids (-1: none) into dst [64] for the math warpgroups' mask; then
        one arrival on bar once every loader thread has stored."""
        dst.slice(0, 16).store(i0)
        dst.slice(16, 16).store(i1)
        dst.slice(32, 16).store(i2)
        dst.slice(48, 16).store(i3)
        _signal(bar)

    @gluon.jit
    def _loader(q_ptr, stride_qn, stride_qh, kv_ptr, stride_kv, idx_ptr, stride_in, num_idx,
                counts_ptr, HAS_COUNTS: gl.constexpr, num_items, num_heads, q_s, k_s, i_s,
                q_ready, q_empty, ready, empty, ids_bar, D: gl.constexpr, HBLK: gl.constexpr):
        """The loader warpgroup over this program's items: q (two channel halves) once both
        math warpgroups are past the previous item's last q . k, then each pair of chunks as
        four half-chunks (buffers 0 / 1: chunk a's channel halves, 2 / 3: chunk b's) in the
        order 0, 3, 1, 2, each once its buffer is free (pair t: the buffer's t-th use).
        Chunk a's and b's row ids go to shared memory with their first half-chunk (the math
        warpgroups' masks); the next pair's are loaded as the current ones die."""
        HALF: gl.constexpr = D // 2
        # lanes along a row: 16-byte copies, 16 lanes a row (two row ids a thread) from 128
        # channels a half, 8 lanes below; 8-byte copies at 32 channels (16 rows on four warps)
        VEC: gl.constexpr = 8 if HALF >= 64 else 4
        TC: gl.constexpr = 16 if HALF >= 128 else HALF // VEC
        CP: gl.constexpr = gl.BlockedLayout([1, VEC], [32 // TC, TC], [4, 1], [1, 0])
        lo = gl.arange(0, HALF, layout=gl.SliceLayout(0, CP))
        hi = lo + HALF
        t = 0
        it = 0
        for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
            n = (item // HBLK).to(gl.int64)
            h0 = (item % HBLK) * 64
            idx_row = idx_ptr + n * stride_in
            cnt = _row_count(counts_ptr, n, num_idx, HAS_COUNTS)
            num_pairs = gl.cdiv(gl.maximum(cnt, 1), 2 * _BK)
            a0 = _slice_ids(idx_row, cnt, 0, CP)
            a1 = _slice_ids(idx_row, cnt, 16, CP)
            a2 = _slice_ids(idx_row, cnt, 32, CP)
            a3 = _slice_ids(idx_row, cnt, 48, CP)
            b0 = _slice_ids(idx_row, cnt, 64, CP)
            b1 = _slice_ids(idx_row, cnt, 80, CP)
            b2 = _slice_ids(idx_row, cnt, 96, CP)
            b3 = _slice_ids(idx_row, cnt, 112, CP)
            mbarrier.wait(q_empty, (it & 1) ^ 1)
            for i in gl.static_range(4):  # q's heads h0 + 16 i .. (past num_heads: zeros)
                hq = h0 + 16 * i + gl.arange(0, 16, layout=gl.SliceLayout(1, CP))
                hq = gl.where(hq < num_heads, hq, -1)
                q_row = q_ptr + n * stride_qn
                _copy_slice(q_s.index(gl.minimum(it, 0)).slice(16 * i, 16, dim=0), q_row,
                            stride_qh, hq, lo, CP)
                _copy_slice(q_s.index(1 + gl.minimum(it, 0)).slice(16 * i, 16, dim=0), q_row,
                            stride_qh, hq, hi, CP)
            async_copy.mbarrier_arrive(q_ready, increment_count=False)
            for j in range(num_pairs):
                phase = (t & 1) ^ 1
                zero = gl.minimum(t, 0)  # 0, opaque: the buffers' addresses per pair, not hoisted
                mbarrier.wait(empty.index(0), phase, pred=t > 0)
                _fill_half(k_s.index(0 + zero), kv_ptr, stride_kv, a0, a1, a2, a3, lo, CP)
                async_copy.mbarrier_arrive(ready.index(0), increment_count=False)
                _put_ids(i_s.index(0), ids_bar.index(0), a0, a1, a2, a3)
                mbarrier.wait(empty.index(3), phase, pred=t > 0)
                _fill_half(k_s.index(3 + zero), kv_ptr, stride_kv, b0, b1, b2, b3, hi, CP)
                async_copy.mbarrier_arrive(ready.index(3), increment_count=False)
                _put_ids(i_s.index(1), ids_bar.index(1), b0, b1, b2, b3)
                mbarrier.wait(empty.index(1), phase, pred=t > 0)
                _fill_half(k_s.index(1 + zero), kv_ptr, stride_kv, a0, a1, a2, a3, hi, CP)
                async_copy.mbarrier_arrive(ready.index(1), increment_count=False)
                r0 = (j + 1) * 2 * _BK  # the next pair's ids, loaded as these die
                a0 = _slice_ids(idx_row, cnt, r0, CP)
                a1 = _slice_ids(idx_row, cnt, r0 + 16, CP)
                a2 = _slice_ids(idx_row, cnt, r0 + 32, CP)
                a3 = _slice_ids(idx_row, cnt, r0 + 48, CP)
                mbarrier.wait(empty.index(2), phase, pred=t > 0)
                _fill_half(k_s.index(2 + zero), kv_ptr, stride_kv, b0, b1, b2, b3, lo, CP)
                async_copy.mbarrier_arrive(ready.index(2), increment_count=False)
                b0 = _slice_ids(idx_row, cnt, r0 + 64, CP)
                b1 = _slice_ids(idx_row, cnt, r0 + 80, CP)
                b2 = _slice_ids(idx_row, cnt, r0 + 96, CP)
                b3 = _slice_ids(idx_row, cnt, r0 + 112, CP)
                t += 1
            it += 1

    @gluon.jit
    def _qk(q_s, k_s, ready, first: gl.constexpr, second: gl.constexpr, phase, zero,
            MMA_S: gl.constexpr):
        """S = q k^T [64, BK] over both channel halves: half ``first`` (buffer ``first``) then
        ``second``, each issued once its rows have landed; waited here."""
        q_first: gl.constexpr = first % 2
        q_second: gl.constexpr = second % 2
        s = gl.zeros([64, _BK], gl.float32, MMA_S)
        mbarrier.wait(ready.index(first), phase)
        fence_async_shared()  # the copies' writes, before the wgmma reads them
        s = warpgroup_mma(q_s.index(q_first + zero), k_s.index(first + zero).permute((1, 0)),
                          s, is_async=True)
        mbarrier.wait(ready.index(second), phase)
        fence_async_shared()
        s = warpgroup_mma(q_s.index(q_second + zero),
                          k_s.index(second + zero).permute((1, 0)), s, is_async=True)
        return warpgroup_mma_wait(num_outstanding=0, deps=(s, ))

    @gluon.jit
    def _masked(s, ids, bar, phase, qk_scale, MMA_S: gl.constexpr):
        """S in base 2: its scaled scores, -inf at the chunk's ids < 0 (the loader's copy in
        ``ids``, written under ``bar``: -1 past the list)."""
        mbarrier.wait(bar, phase)
        iv = ids.load(gl.SliceLayout(0, MMA_S))
        return gl.where((iv >= 0)[None, :], s * qk_scale, float("-inf"))

    @gluon.jit
    def _finite(m):
        """A row max as the exponent's offset (0 for a row with nothing yet: its P is 0)."""
        return gl.where(m == float("-inf"), 0.0, m)

    @gluon.jit
    def _store_half(acc, m, l, sink_ptr, out_ptr, n, h0, c0, stride_on, stride_oh, num_heads,
                    HALF: gl.constexpr, MMA_O: gl.constexpr):
        """out[n, h0 + i, c0 : c0 + HALF] = O / (sum + exp(sink - max)) in bf16 (zeros for a
        query with no valid row); heads past num_heads are not stored. m, l: rows of O."""
        hs = h0 + gl.arange(0, 64, layout=gl.SliceLayout(1, MMA_O))
        sink = gl.load(sink_ptr + hs, mask=hs < num_heads, other=0.0) * _LOG2E_C
        inv = 1.0 / (l + gl.exp2(sink - _finite(m)))
        co = c0 + gl.arange(0, HALF, layout=gl.SliceLayout(0, MMA_O))
        dst = out_ptr + n * stride_on + hs.to(gl.int64)[:, None] * stride_oh + co[None, :]
        gl.store(dst, (acc * inv[:, None]).to(gl.bfloat16), mask=(hs < num_heads)[:, None])

    @gluon.jit
    def _online(s, m_from, m, l, acc, ROW_O: gl.constexpr):
        """One chunk's online-softmax step in base 2: the new max max(m_from, rowmax S) (m_from:
        the running max, or warpgroup 0's m0 for warpgroup 1), P = exp2(S - max), the sum and
        this warpgroup's O rescaled from the running max m. Returns P, the max, the sum, O."""
        m_new = gl.maximum(m_from, gl.max(s, axis=1))
        alpha = gl.exp2(m - _finite(m_new))
        p = gl.exp2(s - _finite(m_new)[:, None])
        l = l * alpha + gl.sum(p, axis=1)
        acc = acc * gl.convert_layout(alpha, ROW_O)[:, None]
        return p, m_new, l, acc

    @gluon.jit
    def _pair0(q_s, k_s, p_s, m_s, i_s, ready, empty, q_empty, m_bar, p_bar, ids_bar, acc, m, l,
               j, num_pairs, t, qk_scale, MMA_S: gl.constexpr, MMA_O: gl.constexpr):
        """Warpgroup 0's part of pair t (chunk a): q . k, its softmax first (m0 handed over),
        P_a V_a[:, :D/2] from registers, P_a rescaled to m1 for warpgroup 1, then P_b V_b[:,
        :D/2] from shared memory. Returns O's half, the running max (m1) and this sum."""
        LP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA_O, k_width=2)
        ROW_S: gl.constexpr = gl.SliceLayout(1, MMA_S)
        ROW_O: gl.constexpr = gl.SliceLayout(1, MMA_O)
        phase = t & 1
        zero = gl.minimum(t, 0)  # 0, opaque: operand descriptors per pair, not hoisted
        s = _qk(q_s, k_s, ready, 0, 1, phase, zero, MMA_S)
        if j == num_pairs - 1:
            _signal(q_empty)  # this warpgroup's last q . k of the item
        _signal(empty.index(1))  # a's second half: q . k done (b's p . v still reads it)
        s = _masked(s, i_s.index(0), ids_bar.index(0), phase, qk_scale, MMA_S)
        p, m0, l, acc = _online(s, m, m, l, acc, ROW_O)
        m_s.index(0).store(m0)
        _signal(m_bar.index(0))
        acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), LP), k_s.index(zero), acc,
                            is_async=True)
        mbarrier.wait(m_bar.index(1), phase)
        m1 = m_s.index(1).load(ROW_S)
        # m1 >= m0; a row with nothing yet (m0 -inf) has P_a, O and l all 0
        beta = gl.where(m0 == float("-inf"), 1.0, gl.exp2(m0 - _finite(m1)))
        p_s.index(0).store((p * beta[:, None]).to(gl.bfloat16))
        fence_async_shared()  # P_a's stores, before warpgroup 1's wgmma reads them
        _signal(p_bar.index(0))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        _signal(empty.index(0))  # a's first half: both reads done
        acc = acc * gl.convert_layout(beta, ROW_O)[:, None]
        l = l * beta
        mbarrier.wait(p_bar.index(1), phase)
        acc = warpgroup_mma(p_s.index(1 + zero), k_s.index(2 + zero), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        _signal(empty.index(2))  # b's first half: warpgroup 0's p . v done
        return acc, m1, l

    @gluon.jit
    def _pair1(q_s, k_s, p_s, m_s, i_s, ready, empty, q_empty, m_bar, p_bar, ids_bar, acc, m, l,
               j, num_pairs, t, qk_scale, MMA_S: gl.constexpr, MMA_O: gl.constexpr):
        """Warpgroup 1's part of pair t (chunk b): q . k, its softmax from warpgroup 0's m0 (m1
        handed back), P_b V_b[:, D/2:] from registers, P_b stored for warpgroup 0, then P_a
        V_a[:, D/2:] from shared memory. Returns O's half, the running max (m1) and this sum."""
        LP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA_O, k_width=2)
        ROW_S: gl.constexpr = gl.SliceLayout(1, MMA_S)
        ROW_O: gl.constexpr = gl.SliceLayout(1, MMA_O)
        phase = t & 1
        zero = gl.minimum(t, 0)
        s = _qk(q_s, k_s, ready, 3, 2, phase, zero, MMA_S)
        if j == num_pairs - 1:
            _signal(q_empty)
        _signal(empty.index(2))  # b's first half: q . k done (a's p . v still reads it)
        s = _masked(s, i_s.index(1), ids_bar.index(1), phase, qk_scale, MMA_S)
        mbarrier.wait(m_bar.index(0), phase)
        m0 = m_s.index(0).load(ROW_S)
        p, m1, l, acc = _online(s, m0, m, l, acc, ROW_O)
        m_s.index(1).store(m1)
        _signal(m_bar.index(1))
        pb = p.to(gl.bfloat16)
        acc = warpgroup_mma(gl.convert_layout(pb, LP), k_s.index(3 + zero), acc, is_async=True)
        p_s.index(1).store(pb)
        fence_async_shared()  # P_b's stores, before warpgroup 0's wgmma reads them
        _signal(p_bar.index(1))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        _signal(empty.index(3))  # b's second half: both reads done
        mbarrier.wait(p_bar.index(0), phase)
        acc = warpgroup_mma(p_s.index(zero), k_s.index(1 + zero), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        _signal(empty.index(1))  # a's second half: warpgroup 1's p . v done
        return acc, m1, l

    @gluon.jit
    def _math(q_s, k_s, p_s, m_s, l_s, i_s, q_ready, q_empty, ready, empty, m_bar, p_bar, l_bar,
              ids_bar, num_idx, counts_ptr, HAS_COUNTS: gl.constexpr, num_items, sink_ptr,
              out_ptr, stride_on, stride_oh, num_heads, qk_scale, D: gl.constexpr,
              HBLK: gl.constexpr, WG: gl.constexpr):
        """Math warpgroup WG over this program's items: 0 (the default partition) the even
        chunks and O's channels [0, D / 2), 1 (a worker partition) the odd chunks and [D / 2,
        D); at an item's end the two sums meet (shared memory) and each stores its half."""
        HALF: gl.constexpr = D // 2
        MMA_S: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, _BK, 16])
        MMA_O: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HALF, 16])
        ROW_S: gl.constexpr = gl.SliceLayout(1, MMA_S)
        ROW_O: gl.constexpr = gl.SliceLayout(1, MMA_O)
        t = 0
        it = 0
        for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
            n = (item // HBLK).to(gl.int64)
            cnt = _row_count(counts_ptr, n, num_idx, HAS_COUNTS)
            num_pairs = gl.cdiv(gl.maximum(cnt, 1), 2 * _BK)
            m = gl.full([64], float("-inf"), gl.float32, ROW_S)
            l = gl.zeros([64], gl.float32, ROW_S)
            acc = gl.zeros([64, HALF], gl.float32, MMA_O)
            mbarrier.wait(q_ready, it & 1)
            for j in range(num_pairs):
                if WG == 0:
                    acc, m, l = _pair0(q_s, k_s, p_s, m_s, i_s, ready, empty, q_empty, m_bar,
                                       p_bar, ids_bar, acc, m, l, j, num_pairs, t,
                                       qk_scale, MMA_S, MMA_O)
                else:
                    acc, m, l = _pair1(q_s, k_s, p_s, m_s, i_s, ready, empty, q_empty, m_bar,
                                       p_bar, ids_bar, acc, m, l, j, num_pairs, t,
                                       qk_scale, MMA_S, MMA_O)
                t += 1
            l_s.index(WG).store(l)
            _signal(l_bar.index(WG))
            mbarrier.wait(l_bar.index(1 - WG), it & 1)
            l = l + l_s.index(1 - WG).load(ROW_S)
            _store_half(acc, gl.convert_layout(m, ROW_O), gl.convert_layout(l, ROW_O), sink_ptr,
                        out_ptr, n, (item % HBLK) * 64, WG * HALF, stride_on, stride_oh,
                        num_heads, HALF, MMA_O)
            it += 1

    @gluon.jit
    def _attn_prefill_pairs_kernel(q_ptr, stride_qn, stride_qh, kv_ptr, stride_kv, idx_ptr,
                                   stride_in, num_idx, counts_ptr, sink_ptr, out_ptr, stride_on,
                                   stride_oh, num_heads, qk_scale, num_items, D: gl.constexpr,
                                   HBLK: gl.constexpr, HAS_COUNTS: gl.constexpr,
                                   num_warps: gl.constexpr):
        """Math warpgroup 0 (the default partition), math warpgroup 1 and the loader warpgroup
        over items program_id, + num_programs, ... of the N x HBLK (query, head block) items.
        num_idx > 0; HAS_COUNTS: query n reads only its first counts[n] entries (int32)."""
        gl.static_assert(num_warps == 4, "the default partition is math warpgroup 0")
        HALF: gl.constexpr = D // 2
        SW: gl.constexpr = 128 if HALF * 2 >= 128 else HALF * 2
        SH: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=SW, element_bitwidth=16,
                                                rank=2)
        SP: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16,
                                                rank=2)
        VEC: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
        q_s = gl.allocate_shared_memory(gl.bfloat16, [2, 64, HALF], SH)
        k_s = gl.allocate_shared_memory(gl.bfloat16, [4, _BK, HALF], SH)
        p_s = gl.allocate_shared_memory(gl.bfloat16, [2, 64, _BK], SP)
        m_s = gl.allocate_shared_memory(gl.float32, [2, 64], VEC)
        l_s = gl.allocate_shared_memory(gl.float32, [2, 64], VEC)
        i_s = gl.allocate_shared_memory(gl.int32, [2, _BK], VEC)
        q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
        m_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        p_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        l_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        ids_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_ready, count=_LOADER_THREADS)
        mbarrier.init(q_empty, count=2)
        for b in gl.static_range(4):
            mbarrier.init(ready.index(b), count=_LOADER_THREADS)
        # a half-chunk's readers: buffer 0 warpgroup 0, 3 warpgroup 1, 1 and 2 both
        mbarrier.init(empty.index(0), count=1)
        mbarrier.init(empty.index(1), count=2)
        mbarrier.init(empty.index(2), count=2)
        mbarrier.init(empty.index(3), count=1)
        for b in gl.static_range(2):
            mbarrier.init(m_bar.index(b), count=1)
            mbarrier.init(p_bar.index(b), count=1)
            mbarrier.init(l_bar.index(b), count=1)
            mbarrier.init(ids_bar.index(b), count=1)
        gl.warp_specialize([
            (_math, (q_s, k_s, p_s, m_s, l_s, i_s, q_ready, q_empty, ready, empty, m_bar,
                     p_bar, l_bar, ids_bar, num_idx, counts_ptr, HAS_COUNTS, num_items,
                     sink_ptr, out_ptr, stride_on, stride_oh, num_heads, qk_scale, D, HBLK, 0)),
            (_math, (q_s, k_s, p_s, m_s, l_s, i_s, q_ready, q_empty, ready, empty, m_bar,
                     p_bar, l_bar, ids_bar, num_idx, counts_ptr, HAS_COUNTS, num_items,
                     sink_ptr, out_ptr, stride_on, stride_oh, num_heads, qk_scale, D, HBLK, 1)),
            (_loader, (q_ptr, stride_qn, stride_qh, kv_ptr, stride_kv, idx_ptr, stride_in,
                       num_idx, counts_ptr, HAS_COUNTS, num_items, num_heads, q_s, k_s, i_s,
                       q_ready, q_empty, ready, empty, ids_bar, D, HBLK)),
        ], [4, 4], [_MATH_REGS, _LOADER_REGS])


def sparse_attention_sink_pairs(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor,
                                sink: torch.Tensor, softmax_scale: float, out: torch.Tensor,
                                row_counts: torch.Tensor | None = None) -> torch.Tensor:
    """``attention.sparse_attention_sink`` on this kernel into ``out`` (N, H, D) bf16 (the
    caller has checked ``accepts``); ``row_counts`` (N,): query n's first row_counts[n] entries
    only — its item runs the pairs up to its count, not the whole list's (a prompt's picks end
    in -1 padding: at 4K tokens ~10-20 % of the chunks)."""
    n, h, d = q.shape
    if n == 0:
        return out
    assert out.dtype == torch.bfloat16 and out.stride(-1) == 1, out.dtype
    if indices.shape[-1] == 0:  # no rows: the sink alone, a zero output
        return out.zero_()
    indices = indices.to(torch.int32).contiguous()
    counts = indices if row_counts is None else row_counts.to(torch.int32).contiguous()
    hblk = -(-h // HEADS)
    items = n * hblk
    programs = min(items, _sm_count(q.device))
    _attn_prefill_pairs_kernel[(programs, )](
        q, q.stride(0), q.stride(1), kv, kv.stride(0), indices, indices.stride(0),
        indices.shape[-1], counts, sink.float().contiguous(), out, out.stride(0), out.stride(1),
        h, float(softmax_scale) * _LOG2E, items, D=d, HBLK=hblk,
        HAS_COUNTS=row_counts is not None, num_warps=4, maxnreg=MAXNREG)
    return out


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def accepts(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor) -> bool:
    """bf16 q (N, H, D) and rows (M, D), D a power of two in MIN_HEAD_DIM..512, contiguous
    channels and 16-byte aligned rows, on an SM90 GPU with Gluon."""
    d = q.shape[-1]
    return (HAS_GLUON and q.is_cuda and q.dtype == torch.bfloat16 and kv.dtype == torch.bfloat16
            and max(64, MIN_HEAD_DIM) <= d <= 512 and d & (d - 1) == 0 and kv.shape[-1] == d
            and q.stride(-1) == 1 and kv.stride(-1) == 1 and kv.stride(0) % 8 == 0
            and q.stride(1) % 8 == 0 and q.stride(0) % 8 == 0
            and indices.dtype in (torch.int32, torch.int64)
            and sm_major(q.device) == 9)


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases: D = 512 (the released head; with and without row counts), 256,
    128 and 64 (tiny configs)."""
    cases = []
    for d, counts in ((512, True), (512, False), (256, True), (128, False), (64, True)):
        cases.append({
            "id": f"attn_prefill_pairs_d{d}" + ("_counts" if counts else ""), "gluon": True,
            "module": __name__, "kernel": "_attn_prefill_pairs_kernel",
            # the loader keeps a few loop-invariant words in local memory (L1)
            "maxnreg": MAXNREG, "max_stack": 128,
            "signature": {"q_ptr": "*bf16", "stride_qn": "i32", "stride_qh": "i32",
                          "kv_ptr": "*bf16", "stride_kv": "i32", "idx_ptr": "*i32",
                          "stride_in": "i32", "num_idx": "i32", "counts_ptr": "*i32",
                          "sink_ptr": "*fp32",
                          "out_ptr": "*bf16", "stride_on": "i32", "stride_oh": "i32",
                          "num_heads": "i32", "qk_scale": "fp32", "num_items": "i32"},
            "constexprs": {"D": d, "HBLK": 1, "HAS_COUNTS": counts, "num_warps": 4},
            "num_warps": 4, "num_stages": 1, "no_spill": True, "expect_wgmma": True,
            "divisible": ["stride_qn", "stride_qh", "stride_kv", "stride_in", "stride_on",
                          "stride_oh"]})
    return cases
