"""bf16 projections with both wgmma operands in shared memory (Gluon, SM90 only): the prefill
path of an FP8 block weight whose bf16 twin is resident (``Fp8BlockWeight.bf16``, the values
``dequantize`` gives: e4m3 x 2^k is exact in bf16).

    out[t, g, o] = sum_k x[t, g, k] * w[g * O + o, k]

Why: ``linear_wide`` decodes the FP8 weight in registers (the wgmma A operand) and runs at
~0.7 of the bf16 matmul rate at 4,096 rows; torch.matmul on the dequantized weight reaches 0.90
on the same shapes with the same bits (H100 round 227, ``bench/gemm_decode.py`` ``cublas``:
sequential K sums either way). With the weight already bf16 nothing is left for the
warpgroups to do but issue wgmmas:

  * a producer warp (``gl.warp_specialize``) fills a STAGES-deep ring, each stage the token
    tile [BM, BK] and the weight tile [BN, BK] (bf16, 128-byte swizzle), one "full" barrier
    per stage; it refills a stage once its "empty" barrier says the wgmmas reading it are done;
  * the consumer warpgroups (BM / 64 of them, tokens on the wgmma M side, the weight tile
    shared as the B operand, N = BN) issue one m64 nBN k64 wgmma a step and keep one step in
    flight (``warpgroup_mma_wait(1)``): step i - 1's stage is freed once step i is issued;
  * persistent: one program per SM runs tiles p, p + 132, .. (token tiles fastest: a weight
    tile's second read hits L2), the producer running ahead into the next tile's K steps while
    the consumers store the last one's fp32 accumulator as bf16 (masked rows) through
    ``store_layout`` (8 consecutive columns a thread: 16-byte stores — from the wgmma layout
    the stores cost ~4 µs a tile); N 128 tiles where 256 would leave SMs idle (``ss_config``).

H100 (bench/gemm_decode.py ``ss``, the seven slice projections at 4,096 rows, rounds 228-230):
1,592 µs one program a tile, 1,567 persistent, 1,328 with the 16-byte stores, against
``linear_wide``'s 1,647 and torch.matmul's 1,338 on the same weights (η 0.92 of the bf16 rate).

K is summed in order, 16 at a time, into one fp32 accumulator — as ``linear_wide`` does — so
the outputs are bit-identical to it (tests/gpu/test_linear_ss_gpu.py). No split-K: the path is
for prefill row counts (``linear.SS_MIN_ROWS``).

Shapes: x (M, G, K) bf16, K % BK == 0 (BK 64, or 32); w (G * O, K) bf16, O % BN == 0; out (M,
G, O) bf16. Reference: ``linear.linear`` on the FP8 weight (the same values).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from deepinfer.kernels.triton.host_cache import weight_descriptor
from deepinfer.kernels.triton.launch_math import cdiv
from deepinfer.kernels.triton.moe_gluon import HAS_GLUON

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

PRODUCER_WARPS = 1  # the TMA partition (Triton pads it to a warpgroup: three warps wait)
PRODUCER_REGS = 40  # its registers per thread (setmaxnreg)
REGISTER_FILE = 65536  # 32-bit registers per SM
NUM_SMS = 132  # persistent programs (H100 / H200 SXM)

if HAS_GLUON:
    _PRODUCER_WARPS = gl.constexpr(PRODUCER_WARPS)
    _PRODUCER_REGS = gl.constexpr(PRODUCER_REGS)

    @gluon.jit
    def _tile_origin(tile, T_TILES: gl.constexpr, N_TILES, BM: gl.constexpr, BN: gl.constexpr):
        """Tile ``tile`` of the launch -> (group, first token row, first output column): token
        tiles fastest, then the group's output tiles, then the groups."""
        group = tile // (T_TILES * N_TILES)
        rest = tile % (T_TILES * N_TILES)
        return group, (rest % T_TILES) * BM, (rest // T_TILES) * BN

    @gluon.jit
    def _producer(x_desc, w_desc, x_s, w_s, full, empty, num_tiles, N_TILES, O, K,
                  T_TILES: gl.constexpr, STAGES: gl.constexpr, BM: gl.constexpr,
                  BN: gl.constexpr, BK: gl.constexpr):
        """The program's tiles' K steps in order (step g of the program into stage g % STAGES
        once the consumers freed it: its (g // STAGES)-th use; the first STAGES wait for
        nothing), running ahead across tile boundaries."""
        num_steps = K // BK
        g = 0
        for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
            group, tok0, n0 = _tile_origin(tile, T_TILES, N_TILES, BM, BN)
            for i in range(num_steps):
                st = g % STAGES
                mbarrier.wait(empty.index(st), ((g // STAGES) & 1) ^ 1, pred=g >= STAGES)
                bar = full.index(st)
                mbarrier.expect(bar, (BM + BN) * BK * 2)
                tma.async_copy_global_to_shared(x_desc, [tok0, group * K + i * BK], bar,
                                                x_s.index(st))
                tma.async_copy_global_to_shared(w_desc, [group * O + n0, i * BK], bar,
                                                w_s.index(st))
                g += 1

    @gluon.jit
    def _consumer(x_s, w_s, full, empty, out_ptr, num_rows, num_tiles, N_TILES, K, stride_om,
                  stride_og, T_TILES: gl.constexpr, STAGES: gl.constexpr, BM: gl.constexpr,
                  BN: gl.constexpr, BK: gl.constexpr, OUT: gl.constexpr,
                  num_warps: gl.constexpr):
        """Per tile: acc [BM, BN] = x tile @ w tileᵀ over the K steps, one wgmma in flight
        (a step's stage is freed once the next step is issued; the tile's last once it is
        waited); then its bf16 output rows (those below num_rows)."""
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                       warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BN, 16])
        num_steps = K // BK
        g = 0
        for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
            group, tok0, n0 = _tile_origin(tile, T_TILES, N_TILES, BM, BN)
            acc = gl.zeros([BM, BN], gl.float32, MMA)
            for i in range(num_steps):
                st = g % STAGES
                mbarrier.wait(full.index(st), (g // STAGES) & 1)
                acc = warpgroup_mma(x_s.index(st), w_s.index(st).permute((1, 0)), acc,
                                    is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
                # step g - 1's wgmma is done: its stage is free (the arrive follows a
                # partition barrier: every warp got here)
                if i > 0:
                    mbarrier.arrive(empty.index((g - 1) % STAGES), count=1)
                g += 1
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(empty.index((g - 1) % STAGES), count=1)
            # each thread's 8 consecutive columns (``store_layout``: a permutation inside each
            # quad of lanes, warp shuffles) -> 16-byte stores
            v = gl.convert_layout(acc.to(gl.bfloat16), OUT)
            rows = tok0 + gl.arange(0, BM, layout=gl.SliceLayout(1, OUT))
            cols = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, OUT))
            offs = (group.to(gl.int64) * stride_og + rows.to(gl.int64)[:, None] * stride_om
                    + cols[None, :])
            gl.store(out_ptr + offs, v, mask=(rows < num_rows)[:, None] & (cols >= 0)[None, :])

    @gluon.jit
    def _linear_ss_kernel(x_desc, w_desc, out_ptr, num_rows, O, K, stride_om, stride_og,
                          num_tiles, T_TILES: gl.constexpr, STAGES: gl.constexpr,
                          BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                          OUT: gl.constexpr, num_warps: gl.constexpr):
        # persistent: program p runs tiles p, p + P, .. (P programs; ``_tile_origin``)
        n_tiles = O // BN
        x_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BM, BK], x_desc.layout)
        w_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BN, BK], w_desc.layout)
        full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for b in gl.static_range(STAGES):
            mbarrier.init(full.index(b), count=1)
            mbarrier.init(empty.index(b), count=1)
        gl.warp_specialize([
            (_consumer, (x_s, w_s, full, empty, out_ptr, num_rows, num_tiles, n_tiles, K,
                         stride_om, stride_og, T_TILES, STAGES, BM, BN, BK, OUT, num_warps)),
            (_producer, (x_desc, w_desc, x_s, w_s, full, empty, num_tiles, n_tiles, O, K,
                         T_TILES, STAGES, BM, BN, BK)),
        ], [_PRODUCER_WARPS], [_PRODUCER_REGS])
        for b in gl.static_range(STAGES):
            mbarrier.invalidate(full.index(b))
            mbarrier.invalidate(empty.index(b))

    @functools.cache
    def tile_layout(block_k: int):
        """Both rings' shared layout: [rows, BK] bf16, 2 BK-byte swizzle (BK 32 or 64)."""
        return gl.NVMMASharedLayout(swizzle_byte_width=2 * block_k, element_bitwidth=16,
                                    rank=2)


@functools.cache
def store_layout(bm: int, bn: int):
    """The output tile's register layout for the stores [BM, BN] bf16: the accumulator's rows
    (lanes 4 g + q: rows g, + 8; warps: 16-row slices) with each thread's 8 columns consecutive
    (16 bytes: registers hold column bits 0-2 and 5.., the quad lane q bits 3-4) — the wgmma
    layout's columns permuted inside each quad, which a convert does with warp shuffles."""
    cols = [[0, 1 << b] for b in range(3)] + [[0, 1 << b] for b in range(5, bn.bit_length() - 1)]
    return gl.DistributedLinearLayout(
        reg_bases=cols + [[8, 0]], lane_bases=[[0, 8], [0, 16], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16 << b, 0] for b in range((bm // 16).bit_length() - 1)], block_bases=[],
        shape=[bm, bn])


# BM (tokens a tile: 64 per consumer warpgroup), BN (weight rows), BK, STAGES
CONFIG = dict(BM=128, BN=256, BK=64, STAGES=4)


def ss_config(num_rows: int, out_features: int, groups: int = 1) -> dict:
    """``CONFIG``, or N 128 tiles where 256 would leave half the SMs without a tile (wkv's 512
    outputs at 4K rows: 64 tiles) or O is not whole 256-row tiles. H100 round 229: wkv 38.0
    (N 128) against 57.0 µs; wq_a (128 tiles of 256) 60.0 against 72.4 at N 128."""
    tiles = cdiv(num_rows, CONFIG["BM"]) * (out_features // CONFIG["BN"]) * groups
    if out_features % CONFIG["BN"] or 2 * tiles < NUM_SMS:
        return {**CONFIG, "BN": 128}
    return dict(CONFIG)


def launch_regs(warpgroups: int) -> int:
    """The launch's register cap per thread: one program per SM, its consumer warpgroups and
    the producer's (padded) warpgroup; setmaxnreg then gives the producer ``PRODUCER_REGS``
    and the consumers the rest."""
    return REGISTER_FILE // (128 * (warpgroups + 1)) // 8 * 8


def accepts(x3: torch.Tensor, w: torch.Tensor, out_features: int,
            config: dict | None = None) -> bool:
    """bf16 x (M, G, K), M >= 1, against a bf16 weight (G * O, K) row-major, K a multiple of
    BK and O of BN (``ss_config``'s, or ``config``'s)."""
    cfg = {**ss_config(x3.shape[0], out_features, x3.shape[1]), **(config or {})}
    return _accepts_config(x3, w, out_features, cfg)


def _accepts_config(x3: torch.Tensor, w: torch.Tensor, out_features: int, cfg: dict) -> bool:
    """``accepts`` under a whole config."""
    num_rows, groups, num_k = x3.shape
    return (HAS_GLUON and num_rows > 0 and num_k > 0 and num_k % cfg["BK"] == 0
            and x3.dtype == torch.bfloat16 and w.dtype == torch.bfloat16 and w.dim() == 2
            and w.shape == (groups * out_features, num_k) and w.stride(1) == 1
            and out_features % cfg["BN"] == 0)


def linear_ss(x3: torch.Tensor, w: torch.Tensor, out_features: int,
              config: dict | None = None) -> torch.Tensor:
    """bf16 x3 (M, G, K) x bf16 weight (G * out_features, K) -> (M, G, out_features) bf16.
    ``config`` replaces ``ss_config``'s entries (bench/gemm_decode.py)."""
    assert HAS_GLUON, "linear_ss needs triton's Gluon (triton >= 3.5)"
    cfg = {**ss_config(x3.shape[0], out_features, x3.shape[1]), **(config or {})}
    assert _accepts_config(x3, w, out_features, cfg), \
        (f"linear_ss: x {tuple(x3.shape)} {x3.dtype}, w {tuple(w.shape)} {w.dtype}, "
         f"O {out_features}, {cfg} not accepted")
    bm, bn, bk = cfg["BM"], cfg["BN"], cfg["BK"]
    num_rows, groups, num_k = x3.shape
    out = torch.empty((num_rows, groups, out_features), dtype=torch.bfloat16, device=x3.device)
    x2 = x3.contiguous().view(num_rows, groups * num_k)
    x_desc = TensorDescriptor(x2, list(x2.shape), list(x2.stride()), [bm, bk], tile_layout(bk))
    w_desc = weight_descriptor(w, w, [bn, bk], tile_layout(bk), TensorDescriptor)
    t_tiles = cdiv(num_rows, bm)
    warpgroups = bm // 64
    num_tiles = t_tiles * (out_features // bn) * groups
    _linear_ss_kernel[(min(num_tiles, NUM_SMS), )](
        x_desc, w_desc, out, num_rows, out_features, num_k, out.stride(0), out.stride(1),
        num_tiles, T_TILES=t_tiles, STAGES=cfg["STAGES"], BM=bm, BN=bn, BK=bk,
        OUT=store_layout(bm, bn), num_warps=4 * warpgroups, maxnreg=launch_regs(warpgroups))
    return out


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/test_linear_ss.py): the default tile (two
    consumer warpgroups, N 256, 4 stages), N 128 and one warpgroup; wgmma, no spills."""
    cases = []
    for bm, bn, bk, stages in ((128, 256, 64, 4), (128, 128, 64, 4), (64, 256, 64, 4),
                               (128, 256, 32, 6)):
        wg = bm // 64
        cases.append({
            "id": f"linear_ss_bm{bm}_bn{bn}_bk{bk}_s{stages}",
            "gluon": True, "module": __name__, "kernel": "_linear_ss_kernel",
            "signature": {"x_desc": f"tma:bf16:{2 * bk}:{bm}x{bk}",
                          "w_desc": f"tma:bf16:{2 * bk}:{bn}x{bk}",
                          "out_ptr": "*bf16", "num_rows": "i32", "O": "i32", "K": "i32",
                          "stride_om": "i32", "stride_og": "i32", "num_tiles": "i32"},
            "constexprs": {"T_TILES": 32, "STAGES": stages, "BM": bm, "BN": bn, "BK": bk,
                           "OUT": {"call": "store_layout", "args": [bm, bn]},
                           "num_warps": 4 * wg},
            "num_warps": 4 * wg, "num_stages": 1, "expect_wgmma": True, "no_spill": True,
            "maxnreg": launch_regs(wg), "divisible": ["O", "K"]})
    return cases
