"""FP8 projections from 64 rows in Gluon (SM90), decode and prefill alike.
Reference ``linear.linear`` / ``linear.grouped_linear`` (model-spec §4.3); ``linear.py``
hands it bf16 x (the Q8_32-rounded values, exact in bf16) against an ``Fp8BlockWeight`` from
``linear.WIDE_MIN_ROWS`` (64) rows up (``WIDE_MAX_ROWS``: None); ``linear_decode`` keeps fewer.

    out[t, g, o] = sum_k w[g * O + o, k] * x[t, g, k]

Why: ``linear_decode`` (Triton) ran the slice's projections at ~0.3 of the bf16 tensor rate at
256 rows; Nsight Compute (session 14 round 62a, wo_b) showed no single limiter (L2 at 71 % of
its peak, the SM at 35 %, stalls spread). Here the data movement is explicit. A program owns
BO = 64 * WG weight rows (WG warpgroups stacked on the wgmma M side; WG 1 by default: 2 and 4
were slower, rounds 64a / 65a) against one token tile of BT <= 256 rows:

  * both operands go by TMA into one STAGES-deep shared ring, BK columns of K per stage (64 by
    default: two scale columns of the FP8 weight): the weight tile [BO, BK] bytes (BK-byte
    swizzle) and the token tile [BT, BK] bf16 (the wgmma B operand as loaded); rows past M or
    past the weight are zero-filled by the TMA unit;
  * each warpgroup loads its 64 rows of the weight tile from shared memory straight into the
    wgmma register-A layout (``operand_layout``: 2-byte loads of the fragment's K pairs, no
    shuffles), decodes e4m3 x 2^(e-127) there (exact in bf16, as ``linear_decode``) and issues
    one m64 nBT k32 wgmma per scale column; the next step's operands are decoded while those
    run, the accumulator waited before the loop's back edge (an in-flight accumulator there
    made ptxas serialize the wgmmas in ``moe_gluon``: C7515); the two-warpgroup launches issue
    a step's wgmmas before its CTA barrier and TMA refill (``MMA_FIRST``, session 36: the
    barriers and the TMA issue then run under the tensor work);
  * split-K for the few-tile shapes: fp32 partials t-contiguous, summed in split order by
    ``linear_decode._splitk_sum_t_kernel`` (the workspace layout ``linear_decode`` uses; a
    fix-up in the last program of a tile was 2.4x slower, round 66a).

H200 (bench/gemm_decode.py, the seven slice projections): 172.4 vs 230.5 µs at 256 rows, 91.6
vs 120.3 at 64, 1,925 vs 2,704 (``_linear_kernel``) at 4,096 (``wide_config``). Products are
exact (bf16 x bf16 in fp32) and sums fp32: ``linear_decode``'s numbers up to the summation
order. Gluon has no interpreter: CPU tests compile it for sm_90
(tests/kernels/triton/test_linear_wide.py); tests/gpu/test_linear_wide_gpu.py runs it.

Any row count runs (token tiles of at most 256 rows; adjacent programs share a weight tile, so
its second read hits L2).

Shapes: x (M, G, K) bf16, K % 32 == 0; w (G * O, K) uint8 e4m3 codes, O % BO == 0; ws
(ceil(G * O / 32), K / 32) uint8 ue8m0; out (M, G, O) bf16.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from deepinfer.kernels.quantized import Fp8BlockWeight
from deepinfer.kernels.triton import gemm_fp8, linear_decode
from deepinfer.kernels.triton.host_cache import weight_descriptor
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2

try:  # Gluon ships with triton >= 3.5; the layouts below need the NVIDIA Hopper module
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    HAS_GLUON = True
except (ImportError, OSError, RuntimeError):  # pragma: no cover - depends on the install
    HAS_GLUON = False

MAX_TILE_ROWS = 256  # the widest token tile (wgmma N); more rows: several token tiles
NUM_SMS = 132  # H200
STEP_K = 32  # one scale column of the FP8 weight: K's granularity (BK is 32 or 64)

if HAS_GLUON:
    # 3.6 calls the CTA barrier thread_barrier, 3.7 barrier
    from deepinfer.kernels.triton.moe_gluon import cta_barrier

    @gluon.jit
    def issue_at(w_desc, x_desc, w_s, x_s, bars, row0, tok0, w_col0, x_col0, step, num_steps,
                 STAGES: gl.constexpr, BO: gl.constexpr, BT: gl.constexpr, BK: gl.constexpr):
        """TMA of K step ``step``'s weight tile [BO, BK] and token tile [BT, BK] into ring
        slot step % STAGES (none past the last step)."""
        st = step % STAGES
        ok = step < num_steps
        mbarrier.expect(bars.index(st), BO * BK + BT * BK * 2, pred=ok)
        tma.async_copy_global_to_shared(w_desc, [row0, w_col0 + step * BK], bars.index(st),
                                        w_s.index(st), pred=ok)
        tma.async_copy_global_to_shared(x_desc, [tok0, x_col0 + step * BK], bars.index(st),
                                        x_s.index(st), pred=ok)

    @gluon.jit
    def _ue8m0_f32(e):
        """ue8m0 bytes (int32) -> 2^(e - 127) as fp32 (e = 0: the subnormal 2^-127)."""
        bits = gl.where(e == 0, 0x00400000, e << 23)
        return bits.to(gl.float32, bitcast=True)

    @gluon.jit
    def _operand(w_s, stage, kk: gl.constexpr, s, LW: gl.constexpr, LA: gl.constexpr):
        """Columns [32 kk, 32 kk + 32) of a step's weight tile from shared memory, decoded
        (e4m3 x its row's scale byte s, exact in bf16) in the wgmma A layout."""
        w8 = w_s.index(stage).slice(kk * 32, 32, dim=1).load(LW)
        wf = w8.to(gl.float8e4nv, bitcast=True).to(gl.float32) * _ue8m0_f32(s)[:, None]
        return gl.convert_layout(wf.to(gl.bfloat16), LA)

    @gluon.jit
    def _scales(s_ptrs, s_ok, step, num_steps, KSUB: gl.constexpr):
        """The scale bytes (int32) of a thread's rows for K step min(step, last): KSUB columns
        (the second a copy of the first when KSUB == 1)."""
        col = gl.minimum(step, num_steps - 1) * KSUB
        s0 = gl.load(s_ptrs + col, mask=s_ok, other=127).to(gl.int32)
        s1 = s0
        if KSUB == 2:
            s1 = gl.load(s_ptrs + col + 1, mask=s_ok, other=127).to(gl.int32)
        return s0, s1

    @gluon.jit
    def _operands(w_s, stage, s0, s1, KSUB: gl.constexpr, LW: gl.constexpr, LA: gl.constexpr):
        """A step's KSUB wgmma A operands (the second a copy of the first when KSUB == 1)."""
        a0 = _operand(w_s, stage, 0, s0, LW, LA)
        a1 = a0
        if KSUB == 2:
            a1 = _operand(w_s, stage, 1, s1, LW, LA)
        return a0, a1

    @gluon.jit
    def issue_mmas(a0, a1, x_t, acc, KSUB: gl.constexpr):
        """A step's wgmmas, in flight on return: acc += a_kk @ x_t[:, 32 kk : 32 kk + 32]^T for
        its KSUB scale columns."""
        acc = warpgroup_mma(a0, x_t.slice(0, 32, dim=1).permute((1, 0)), acc, is_async=True)
        if KSUB == 2:
            acc = warpgroup_mma(a1, x_t.slice(32, 32, dim=1).permute((1, 0)), acc,
                                is_async=True)
        return acc

    @gluon.jit
    def next_operands(w_s, ready, s_ptrs, s_ok, n0, n1, i, num_steps, STAGES: gl.constexpr,
                      KSUB: gl.constexpr, LW: gl.constexpr, LA: gl.constexpr):
        """During step i: step i + 1's operands (the last step reloads its own: a finished
        phase waits for nothing) from scales n0, n1 loaded a step ahead, and step i + 2's
        scales. Returns (b0, b1, n0, n1)."""
        nxt = gl.minimum(i + 1, num_steps - 1)
        m0, m1 = _scales(s_ptrs, s_ok, i + 2, num_steps, KSUB)
        mbarrier.wait(ready.index(nxt % STAGES), (nxt // STAGES) & 1)
        b0, b1 = _operands(w_s, nxt % STAGES, n0, n1, KSUB, LW, LA)
        return b0, b1, m0, m1

    @gluon.jit
    def program_tile(O, K, k_per_split, T_TILES: gl.constexpr, BO: gl.constexpr,
                     BT: gl.constexpr, BK: gl.constexpr):
        """The program's tile: (output tile, split, group, first weight row, first token,
        first K column, K steps of BK). Adjacent programs share a weight tile (their token
        tiles differ), so its second read hits L2."""
        pid_o = gl.program_id(0) // T_TILES
        t_tile = gl.program_id(0) % T_TILES
        split = gl.program_id(1)
        group = gl.program_id(2)
        k_begin = split * k_per_split
        num_steps = (gl.minimum(k_begin + k_per_split, K) - k_begin) // BK
        return pid_o, split, group, group * O + pid_o * BO, t_tile * BT, k_begin, num_steps

    @gluon.jit
    def scale_pointers(ws_ptr, row0, k_begin, W_ROWS, stride_wsr, BO: gl.constexpr,
                       LW: gl.constexpr):
        """A thread's rows' scale bytes at the split's first column, and which rows exist
        (rows past the weight read 127: ``_scales``)."""
        r_w = row0 + gl.arange(0, BO, layout=gl.SliceLayout(1, LW))
        return ws_ptr + (r_w // 32).to(gl.int64) * stride_wsr + k_begin // 32, r_w < W_ROWS

    @gluon.jit
    def _linear_wide_kernel(x_desc, w_desc, ws_ptr, out_ptr, M, O, K, W_ROWS, k_per_split,
                            split_stride, stride_wsr, stride_om, stride_og,
                            SPLIT_K: gl.constexpr, T_TILES: gl.constexpr, BT: gl.constexpr,
                            BK: gl.constexpr, STAGES: gl.constexpr, LW: gl.constexpr,
                            num_warps: gl.constexpr, MMA_FIRST: gl.constexpr):
        BO: gl.constexpr = 16 * num_warps  # 64 weight rows per warpgroup (LW: operand_layout)
        KSUB: gl.constexpr = BK // 32  # scale columns (one k32 wgmma each) per K step
        gl.static_assert(KSUB == 1 or KSUB == 2, "BK must be 32 or 64")
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                       warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BT, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        pid_o, split, group, row0, tok0, k_begin, num_steps = program_tile(
            O, K, k_per_split, T_TILES, BO, BT, BK)

        w_s = gl.allocate_shared_memory(gl.uint8, [STAGES, BO, BK], w_desc.layout)
        x_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, BK], x_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for b in gl.static_range(STAGES):
            mbarrier.init(bars.index(b), count=1)
        for b in gl.static_range(STAGES - 1):
            issue_at(w_desc, x_desc, w_s, x_s, bars, row0, tok0, k_begin, group * K + k_begin, b,
                     num_steps, STAGES, BO, BT, BK)

        # the scale bytes of a thread's rows, KSUB columns per step
        s_ptrs, s_ok = scale_pointers(ws_ptr, row0, k_begin, W_ROWS, stride_wsr, BO, LW)
        s0, s1 = _scales(s_ptrs, s_ok, 0, num_steps, KSUB)
        n0, n1 = _scales(s_ptrs, s_ok, 1, num_steps, KSUB)
        mbarrier.wait(bars.index(0), 0)
        a0, a1 = _operands(w_s, 0, s0, s1, KSUB, LW, LA)

        acc = gl.zeros([BO, BT], gl.float32, MMA)
        for i in range(num_steps):
            # MMA_FIRST: step i's wgmmas go first, so the barrier and the TMA issue below run
            # under them (the refilled stage is not step i's)
            if MMA_FIRST:
                acc = issue_mmas(a0, a1, x_s.index(i % STAGES), acc, KSUB)
            # every warp is past step i - 1 (its wgmmas waited, step i's operands loaded): the
            # stage the TMA below refills, (i - 1) % STAGES, is free
            cta_barrier()
            issue_at(w_desc, x_desc, w_s, x_s, bars, row0, tok0, k_begin, group * K + k_begin,
                     i + STAGES - 1, num_steps, STAGES, BO, BT, BK)
            if not MMA_FIRST:
                acc = issue_mmas(a0, a1, x_s.index(i % STAGES), acc, KSUB)
            # the next step's operands while the wgmmas run
            b0, b1, n0, n1 = next_operands(w_s, bars, s_ptrs, s_ok, n0, n1, i, num_steps,
                                           STAGES, KSUB, LW, LA)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            a0, a1 = b0, b1
        for b in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(b))

        store_tile(acc, out_ptr, pid_o * BO, tok0, split, group, M, O, split_stride, stride_om,
                   stride_og, SPLIT_K, T_TILES, BO, BT, MMA)

    @gluon.jit
    def store_tile(acc, out_ptr, row_lo, tok0, split, group, M, O, split_stride, stride_om,
                   stride_og, SPLIT_K: gl.constexpr, T_TILES: gl.constexpr, BO: gl.constexpr,
                   BT: gl.constexpr, MMA: gl.constexpr):
        """A program's accumulator [BO, BT] (layout MMA): out[t, g, o] bf16, or its split's
        fp32 partial in the workspace (SPLIT_K, G, O, T_TILES * BT), t contiguous."""
        rows_o = row_lo + gl.arange(0, BO, layout=gl.SliceLayout(1, MMA))
        offs_t = tok0 + gl.arange(0, BT, layout=gl.SliceLayout(0, MMA))
        mask = (rows_o < O)[:, None] & (offs_t < M)[None, :]
        if SPLIT_K > 1:
            ptrs = (out_ptr + split.to(gl.int64) * split_stride
                    + (group * O + rows_o).to(gl.int64)[:, None] * (T_TILES * BT)
                    + offs_t[None, :])
            gl.store(ptrs, acc, mask=mask)
        else:
            ptrs = (out_ptr + group.to(gl.int64) * stride_og
                    + offs_t.to(gl.int64)[None, :] * stride_om + rows_o[:, None])
            gl.store(ptrs, acc.to(gl.bfloat16), mask=mask)

    @functools.cache
    def weight_layout(block_k: int):
        """The weight ring's shared layout: [BO, BK] bytes, BK-byte swizzle."""
        return gl.NVMMASharedLayout(swizzle_byte_width=block_k, element_bitwidth=8, rank=2)

    @functools.cache
    def token_layout(block_k: int):
        """The token ring's shared layout: [BT, BK] bf16 (2 BK bytes per row), 2 BK-byte
        swizzle (the wgmma B operand's)."""
        return gl.NVMMASharedLayout(swizzle_byte_width=2 * block_k, element_bitwidth=16,
                                    rank=2)


@functools.cache
def operand_layout(warpgroups: int):
    """The weight tile's register layout [64 WG, 32] bytes: a thread's part of the wgmma A
    fragment (warp w, lane 4 g + q: rows 16 w + g and + 8, K columns 2 q + {0, 1}, + 8, + 16,
    + 24), the register-A layout of a bf16 tile, over the weight's bytes; warpgroups stacked on
    the rows. Built here, lists of lists: inside a jit function the literal's inner lists
    become tuples, and the layout would no longer compare equal to the one a slice of it
    expands back to (a broadcast error)."""
    warps = [[16 << b, 0] for b in range(2 + (warpgroups - 1).bit_length())]
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [8, 0], [0, 8], [0, 16]],
        lane_bases=[[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]],
        warp_bases=warps, block_bases=[], shape=[64 * warpgroups, 32])


# Two warpgroups per 256-row token tile (BO 128) from this many programs (O / 128 x token tiles x
# groups) up: at 4,096 rows a projection is L2-bound (round 100a, wo_b: L2 at 83 % of its peak,
# the tensor pipe at 54 %) and 128 weight rows per token tile read 0.56x the L2 bytes per FLOP;
# such a program takes a whole SM, so the grid needs waves of them (wq_a / wkv at 4,096 rows,
# 128 / 64 programs, ran 10-20 % slower on two on the H200 in round 101a).
TWO_WG_MIN_PROGRAMS = 4 * NUM_SMS
# ... from ``WIDE_TWO_WG_ROWS`` rows, from this many: with MMA_FIRST two warpgroups won at
# 4,096 rows from 128 programs (H100 rounds 177-178, µs per call: wq_a, 128 programs, 101 on
# one warpgroup against 70 on two, 64 with MMA_FIRST; shared w1/w3, 288 programs, 223 against
# 208, 193 with it; wkv, 64 programs, stays on one: 50.5 against 66.3)
WIDE_TWO_WG_MIN_PROGRAMS = 128
WIDE_TWO_WG_ROWS: int | None = 4096  # None: the four waves at every row count
# the two-warpgroup launches issue a step's wgmmas before its barrier and TMA refill (read at
# each call; the same bits). H100 round 178, the seven projections at 4,096 rows as
# ``wide_config`` picked them before the row rule above: 1,862 µs off, 1,727 on (wo_b 572 ->
# 533, wq_b 544-640 -> 519-529, shared w2 177 -> 160-169, indexer wq_b 145 -> 131); the
# one-warpgroup launches gain nothing (wq_a, wkv at 4,096 rows: level / +3 %; the decode
# sizes 64-256: -4 to +4 %), so they keep the old order
MMA_FIRST = True


def wide_config(num_rows: int, out_features: int | None = None, groups: int = 1) -> dict:
    """Launch per row class (and, at 256-row token tiles, per grid size): WG warpgroups (BO =
    64 WG weight rows), token tile BT (one tile of all rows, at least 64), BK (32 or 64: K
    columns per ring stage, one k32 wgmma each), STAGES ring depth, split-K for ``waves``
    waves of programs. H200, the slice's seven projections one call each, CUDA graphs
    (bench/gemm_decode.py; linear_decode in the same run): round 64a — one warpgroup beat 2
    and 4 at every row count up to 256; round 65a — BK 64 (half the barriers and waits per K)
    beat 32:

        rows  this launch                 µs     linear_decode
         64   BT 64,  BK 64, 4 stages, 2 waves   91.6   120.3
        128   BT 128, BK 64, 4 stages, 2 waves  133.6   151.9
        256   BT 256, BK 64, 3 stages, 1 wave   172.4   230.5

    (256 rows: 2 stages 229.3, 2 / 3 waves 190.3 / 193.3, BT 128 211.1; 64 rows: 6 stages
    103.0.) From ``TWO_WG_MIN_PROGRAMS`` programs of BO 128 (``out_features`` a multiple of
    128): two warpgroups, 4 stages (round 101a, 4,096 rows: the seven projections 1,928 µs
    on one warpgroup, 1,806 on two for all seven, ~1,785 as this picks per shape in that run;
    wo_b 672 -> 562, shared w2 210 -> 177; 3 / 5 stages 1,858 / 1,867 µs: one program per SM
    holds fewer stages in flight than two); from ``WIDE_TWO_WG_ROWS`` rows already from
    ``WIDE_TWO_WG_MIN_PROGRAMS`` such programs. The two-warpgroup launches take ``MMA_FIRST``
    (read here)."""
    bt = min(MAX_TILE_ROWS, max(64, next_power_of_2(max(num_rows, 1))))
    if bt == 256:
        min_programs = (WIDE_TWO_WG_MIN_PROGRAMS if WIDE_TWO_WG_ROWS is not None
                        and num_rows >= WIDE_TWO_WG_ROWS else TWO_WG_MIN_PROGRAMS)
        if (out_features and out_features % 128 == 0 and out_features // 128
                * cdiv(num_rows, bt) * groups >= min_programs):
            return dict(WG=2, BT=bt, BK=64, STAGES=4, waves=1, MMA_FIRST=MMA_FIRST)
        return dict(WG=1, BT=bt, BK=64, STAGES=3, waves=1, MMA_FIRST=False)
    return dict(WG=1, BT=bt, BK=64, STAGES=4, waves=2, MMA_FIRST=False)


def wide_split(num_rows: int, programs: int, num_k: int, bk: int, waves: float) -> int:
    """K partitions of a launch of ``programs`` (weight tile, token tile, group) programs:
    ``waves`` waves of them up to ``gemm_fp8.INVARIANT_MIN_ROWS`` rows, none from there on (the
    sums of a row then run in one order at any row count: batch-invariant prefill steps)."""
    if num_rows >= gemm_fp8.INVARIANT_MIN_ROWS:
        return 1
    return gemm_fp8.split_k_for_waves(programs, num_k, bk, waves, NUM_SMS)


def accepts(x3: torch.Tensor, weight: Any, out_features: int, warpgroups: int = 1) -> bool:
    """bf16 x (M, G, K) with M >= 1 and K % 32 == 0 against an Fp8BlockWeight
    whose output features fill whole programs (O % 64 WG == 0)."""
    return (HAS_GLUON and 0 < x3.shape[0] and x3.shape[2] > 0
            and x3.shape[2] % STEP_K == 0 and x3.dtype == torch.bfloat16
            and isinstance(weight, Fp8BlockWeight) and out_features % (64 * warpgroups) == 0)


def linear_wide(x3: torch.Tensor, weight: Fp8BlockWeight, out_features: int,
                split_k: int | None = None, config: dict | None = None) -> torch.Tensor:
    """bf16 x3 (M, G, K) x FP8 block weight (G * out_features, K) -> (M, G, out_features)
    bf16. ``config`` replaces ``wide_config``'s entries (bench/gemm_decode.py); a BK of 64 that
    does not divide K falls back to 32."""
    assert HAS_GLUON, "linear_wide needs triton's Gluon (triton >= 3.5)"
    num_rows, groups, num_k = x3.shape
    cfg = {**wide_config(num_rows, out_features, groups), **(config or {})}
    wg, bt, bk, stages = cfg["WG"], cfg["BT"], cfg["BK"], cfg["STAGES"]
    assert accepts(x3, weight, out_features, wg), \
        f"linear_wide: x {tuple(x3.shape)} {x3.dtype}, O {out_features} (WG {wg}) not accepted"
    assert bk in (32, 64), f"linear_wide: BK {bk}, expected 32 or 64"
    if num_k % bk:
        bk = STEP_K
    w, w_scale, _ = linear_decode.weight_operands(weight, "linear_wide")
    assert w.shape == (groups * out_features, num_k) and w.stride(1) == 1, \
        f"linear_wide: weight {tuple(w.shape)} does not match x {tuple(x3.shape)}"
    bo = 64 * wg
    out = torch.empty((num_rows, groups, out_features), dtype=torch.bfloat16, device=x3.device)
    x2 = x3.contiguous().view(num_rows, groups * num_k)
    x_desc = TensorDescriptor(x2, list(x2.shape), list(x2.stride()), [bt, bk], token_layout(bk))
    w_desc = weight_descriptor(weight.codes, w, [bo, bk], weight_layout(bk), TensorDescriptor)
    t_tiles = cdiv(num_rows, bt)
    o_tiles = out_features // bo
    if split_k is None:
        split_k = wide_split(num_rows, o_tiles * groups * t_tiles, num_k, bk, cfg["waves"])
    k_per_split = cdiv(num_k // bk, split_k) * bk
    split_k = cdiv(num_k, k_per_split)  # no empty splits
    ws_row = t_tiles * bt
    target = out
    if split_k > 1:
        target = torch.empty((split_k, groups, out_features, ws_row), dtype=torch.float32,
                             device=x3.device)
    _linear_wide_kernel[(o_tiles * t_tiles, split_k, groups)](
        x_desc, w_desc, w_scale, target, num_rows, out_features, num_k, w.shape[0],
        k_per_split, groups * out_features * ws_row, w_scale.stride(0), out.stride(0),
        out.stride(1), SPLIT_K=split_k, T_TILES=t_tiles, BT=bt, BK=bk, STAGES=stages,
        LW=operand_layout(wg), MMA_FIRST=cfg["MMA_FIRST"], num_warps=4 * wg)
    if split_k > 1:
        block_o, block_t = 64, 64
        linear_decode._splitk_sum_t_kernel[(cdiv(out_features, block_o),
                                            cdiv(num_rows, block_t), groups)](
            target, out, num_rows, out_features, groups * out_features * ws_row, out.stride(0),
            out.stride(1), SPLIT_K=split_k, BT=ws_row, BLOCK_O=block_o, BLOCK_T=block_t,
            num_warps=4)
    return out


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/conftest.py ``sm90_compile``): 1, 2 and 4
    warpgroups, token tiles of 64 / 128 / 256, BK 32 and 64, split and not, the wgmmas before
    the TMA refill (``MMA_FIRST``: the 4K launch and a split one); wgmma, no spills."""
    cases = []
    for wg, bt, bk, stages, split_k, first in (
            (1, 64, 32, 6, 2, 0), (1, 128, 32, 6, 1, 0), (1, 256, 32, 4, 2, 0),
            (1, 256, 64, 3, 1, 0), (1, 128, 64, 4, 4, 0), (2, 128, 32, 4, 2, 0),
            (2, 256, 64, 4, 1, 0), (4, 128, 64, 2, 1, 0), (2, 256, 64, 4, 1, 1),
            (1, 64, 64, 4, 2, 1)):
        cases.append({
            "id": f"linear_wide_wg{wg}_bt{bt}_bk{bk}_s{stages}_split{split_k}"
                  + ("_mmafirst" if first else ""),
            "gluon": True, "module": __name__, "kernel": "_linear_wide_kernel",
            "signature": {"x_desc": f"tma:bf16:{2 * bk}:{bt}x{bk}",
                          "w_desc": f"tma:u8:{bk}:{64 * wg}x{bk}",
                          "ws_ptr": "*u8", "out_ptr": "*fp32" if split_k > 1 else "*bf16",
                          "M": "i32", "O": "i32", "K": "i32", "W_ROWS": "i32",
                          "k_per_split": "i32", "split_stride": "i32", "stride_wsr": "i32",
                          "stride_om": "i32", "stride_og": "i32"},
            "constexprs": {"SPLIT_K": split_k, "T_TILES": 1, "BT": bt, "BK": bk, "STAGES": stages,
                           "LW": {"call": "operand_layout", "args": [wg]},
                           "MMA_FIRST": bool(first), "num_warps": 4 * wg},
            "num_warps": 4 * wg, "num_stages": 1, "expect_wgmma": True, "no_spill": True,
            "divisible": ["O", "K", "k_per_split"]})
    return cases
