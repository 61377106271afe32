"""Dense and grouped projections without activation quantization (reference ``linear.linear``,
``linear.grouped_linear``; model-spec §4.3): the LM head, ``wo_a`` and the other plain GEMMs.

    out[n, g, o] = sum_i x[n, g, i] * w[g * O + o, i]        (linear: G = 1)

One kernel for both ops: grid (M tiles × O tiles, split-K, G). The weight is a plain bf16/fp32
tensor or an ``Fp8BlockWeight`` (e4m3 codes, one ue8m0 scale per 32×32 tile), dequantized in
registers 32 columns of K at a time (code × 2^(e-127) is exact in bf16). Accumulation is fp32.

Precision: the reference sums exact products in fp64, so the kernel keeps every product exact and
differs only by fp32 summation. With a bf16-exact weight (bf16 or FP8) the dots run on bf16 tensor
cores and x is split into X_SPLIT bf16 pieces whose sum is x exactly (bf16: 1 piece, fp16: 2,
fp32: 3, the "bf16x3" split: 3 × 8 significant bits cover fp32's 24); products of bf16 pieces are
exact in fp32. Any other weight dtype (fp32, fp16) runs fp32 "ieee" dots (no TF32). The fp32
logit head (fp32 x, bf16 weight) costs three bf16 dots per tile, or one when x holds only bf16
values (as the head's ``y.float()`` does: a device-side flag, computed by torch ops without a
host sync, picks the K loop). With an fp16/fp32 x each K chunk is summed in a fresh accumulator
and then added to the running one in fp32 ("promotion"): Hopper's wgmma accumulator adds with
truncation, whose bias grew to rel 1.4e-5 over K=4096 (1.7e-7 promoted).
The weight is read once: one M tile covers N <= 64, and at larger N the M tiles of one O tile
run adjacently so that the second read hits L2.

Decode (M <= 64) with few O tiles uses split-K (fp32 partials in a workspace, summed in split
order by ``gemm_fp8._splitk_sum_kernel``); so do 65-256 rows (``SPLIT_K_MAX_ROWS``), aiming at one
or two waves of programs. No launch path reads device data on the host.

On an SM90 GPU, bf16 x against an FP8 block weight (every Q8_32 projection, ``wo_a``) goes
elsewhere: from ``WIDE_MIN_ROWS`` rows (decode and prefill alike) to ``linear_wide`` (Gluon,
TMA-fed), below to ``linear_decode``; this kernel keeps bf16 weights (the head, the
compressor) and what those decline.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.quantized import Fp8BlockWeight, Mxfp4ExpertWeights, dense
from deepinfer.kernels.triton import gemm_fp8, linear_decode, linear_ss, linear_wide, quant_act
from deepinfer.kernels.triton.host_cache import sm_major
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2

FP8_TILE = 32
NUM_SMS = 132  # H200
_X_SPLIT = {torch.bfloat16: 1, torch.float16: 2, torch.float32: 3}


@triton.jit
def _k_loop(acc, x_ptrs, w_ptrs, ws_ptrs, offs_k, k_begin, k_end,
            W_FP8: tl.constexpr, PIECES: tl.constexpr, PROMOTE: tl.constexpr,
            DOT_BF16: tl.constexpr, EVEN_K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
            BK: tl.constexpr, KC: tl.constexpr):
    """acc += x[:, k_begin:k_end] @ w[k_begin:k_end, :] (see _linear_kernel for the modes)."""
    for k0 in range(k_begin, k_end, BK):
        for kk in tl.static_range(0, BK, KC):  # KC = 32 (one scale column) for FP8 weights
            x, w = linear_decode.load_chunk(x_ptrs, w_ptrs, ws_ptrs, k0 + kk, k_end, offs_k,
                                            W_FP8, EVEN_K, False)
            if PIECES == 0:
                acc = tl.dot(x.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
            elif not PROMOTE:
                acc = linear_decode.dot_exact(x, w, acc, DOT_BF16)
            else:
                # Promotion: the wgmma accumulator adds with truncation, a bias that grows with K
                # (measured rel 1.4e-5 at K=4096 when accumulating in it); summed one chunk at a
                # time and then added in fp32, it stays at fp32 rounding (1.7e-7).
                if PIECES == 1:  # x is exact in bf16 (checked on the device)
                    # acc - dot(-x, w): Triton folds "acc + dot(x, w, 0)" into dot(x, w, acc),
                    # undoing the promotion (measured 4.4e-6); it does not fold a subtraction.
                    part = linear_decode.dot_exact(0.0 - x.to(tl.float32), w,
                                                   tl.zeros((BM, BN), dtype=tl.float32),
                                                   DOT_BF16)
                    acc -= part
                else:  # x = hi + mid (+ lo), each piece exact in bf16 (any rounding of the casts)
                    xf = x.to(tl.float32)
                    hi = xf.to(tl.bfloat16).to(tl.float32)
                    rest = xf - hi  # exact
                    mid = rest.to(tl.bfloat16).to(tl.float32)
                    part = tl.zeros((BM, BN), dtype=tl.float32)
                    if PIECES == 3:
                        # smallest first
                        part = linear_decode.dot_exact(rest - mid, w, part, DOT_BF16)
                    part = linear_decode.dot_exact(mid, w, part, DOT_BF16)
                    part = linear_decode.dot_exact(hi, w, part, DOT_BF16)
                    acc += part
    return acc


@triton.jit
def _linear_kernel(
    x_ptr,  # (M, G, K) any float dtype, unit stride in K
    w_ptr,  # (G * O, K): plain float, or uint8 e4m3 codes when W_FP8
    ws_ptr,  # uint8 (ceil(G*O/32), ceil(K/32)) ue8m0 tile scales when W_FP8 (else unused)
    exact_ptr,  # bool (1,): every x is exact in bf16 (X_SPLIT > 1 only; else unused)
    out_ptr,  # (M, G, O) output (or the fp32 split-K workspace, SPLIT_K > 1)
    M, O, K, k_per_split, split_stride,
    stride_xm, stride_xg, stride_wo, stride_wsr, stride_om, stride_og,
    W_FP8: tl.constexpr,  # weight is e4m3 codes + 32×32 ue8m0 tiles
    X_SPLIT: tl.constexpr,  # bf16 pieces of x (1, 2 or 3); 0: plain fp32 ieee dot
    X_EXACT: tl.constexpr,  # (X_SPLIT > 1) x holds bf16 values, known on the host: no flag read
    DOT_BF16: tl.constexpr,  # pieces go through bf16 tensor cores (GPU) or fp32 dots (interp.)
    EVEN_K: tl.constexpr,  # K % BK == 0 and k_per_split % BK == 0: no K masks
    SPLIT_K: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, KC: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid_m, pid_n = gemm_fp8.grouped_tile(tl.program_id(0), M, O, BM, BN, GROUP_M)
    group = tl.program_id(2)

    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, KC)
    mask_m = offs_m < M
    mask_n = offs_n < O
    rows_x = tl.where(mask_m, offs_m, 0).to(tl.int64)  # clamp instead of masking the loads
    rows_w = (group * O + tl.where(mask_n, offs_n, 0)).to(tl.int64)
    x_ptrs = x_ptr + group.to(tl.int64) * stride_xg + rows_x[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + rows_w[None, :] * stride_wo + offs_k[:, None]  # [KC, BN], K-major
    ws_ptrs = ws_ptr + (rows_w // 32) * stride_wsr  # [BN], read only when W_FP8

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k_begin = tl.program_id(1) * k_per_split
    k_end = tl.minimum(k_begin + k_per_split, K)
    if X_SPLIT > 1:
        # fp16/fp32 x holding bf16 values (the head's y.float()) needs one dot, not X_SPLIT:
        # a uniform branch around the whole K loop keeps both loops pipelined.
        if X_EXACT:  # bf16 x with promoted fp32 sums: this loop without the flag
            acc = _k_loop(acc, x_ptrs, w_ptrs, ws_ptrs, offs_k, k_begin, k_end, W_FP8, 1, True,
                          DOT_BF16, EVEN_K, BM, BN, BK, KC)
        elif tl.load(exact_ptr) != 0:
            acc = _k_loop(acc, x_ptrs, w_ptrs, ws_ptrs, offs_k, k_begin, k_end, W_FP8, 1, True,
                          DOT_BF16, EVEN_K, BM, BN, BK, KC)
        else:
            acc = _k_loop(acc, x_ptrs, w_ptrs, ws_ptrs, offs_k, k_begin, k_end, W_FP8, X_SPLIT,
                          True, DOT_BF16, EVEN_K, BM, BN, BK, KC)
    else:
        acc = _k_loop(acc, x_ptrs, w_ptrs, ws_ptrs, offs_k, k_begin, k_end, W_FP8, X_SPLIT,
                      False, DOT_BF16, EVEN_K, BM, BN, BK, KC)

    out_ptrs = (out_ptr + group.to(tl.int64) * stride_og + offs_m.to(tl.int64)[:, None] * stride_om
                + offs_n[None, :])
    if SPLIT_K > 1:
        out_ptrs += tl.program_id(1).to(tl.int64) * split_stride
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


# Split-K above 64 rows, up to this many (``gemm_fp8.split_k_for_waves``: one wave of programs up
# to 128 rows, two above): a few dozen 128x128 output tiles with K loops of 40-128 steps are
# latency-bound (e.g. wq_a, N=1024, K=5120: 16 tiles at 256 rows).
SPLIT_K_MAX_ROWS = 256


# bf16 x against a bf16 weight with at least this many output features (the logit head) at
# 65-256 rows: 128x256 tiles, BK 64, 3 stages. H200, head 129280 x 5120, 256 rows, fp32 logits
# (session 13 round 59, bench/gemm_head.py): 657.6 µs against 851.8 for 128x128x64:4:8 and
# 1110.3 for the fp32-x kernel the head used before.
WIDE_BF16_MIN_OUT = 32768


def linear_config(num_rows: int, x_split: int, w_fp8: bool, interpret: bool = False,
                  out_features: int = 0) -> dict:
    """Tile sizes, one config per shape class (no autotune, kernels.md §3.3 rule 3).

    Decode (M <= 64): one M tile covers all rows (BM = M rounded up to 16..64), BN=64 for many O
    tiles, BK=128, 5 stages in flight. fp32 x (the logit head): BN=128, BK=64; the kernel holds
    two K loops (one bf16 dot or three), each with its own pipeline buffers. H200, CUDA graph,
    head O=129280 I=4096, bf16-valued / general fp32 x: N=1 271/310 us (3.9 TB/s of weight),
    N=16 264/307, N=64 319/628, N=256 877/2004 us (cuBLAS bf16 x bf16: 245, 257, 292, 440).
    Prefill: 128×128 tiles, BK=64 (BK=32, 4 stages for FP8 weights), GROUP_M=8. fp32 "ieee"
    dots (X_SPLIT=0: non-bf16 weights) are CUDA-core FMAs: small 64×64×32 tiles. Bf16 x against
    FP8 weights runs ``linear_wide`` / ``linear_decode`` instead on an SM90 GPU
    (``WIDE_MIN_ROWS``, ``DECODE_KERNEL_MAX_ROWS``); these FP8 tiles serve the others.
    """
    if interpret:
        return dict(BM=16, BN=32, BK=32, GROUP_M=2, num_warps=4, num_stages=1)
    if x_split == 0:
        return dict(BM=32 if num_rows <= 32 else 64, BN=64, BK=32, GROUP_M=8, num_warps=4,
                    num_stages=3)
    if num_rows <= 64:
        bm = max(16, next_power_of_2(num_rows))
        if x_split == 3:  # fp32 x (the logit head): BN=128 and these stages measured best
            return dict(BM=bm, BN=128, BK=64, GROUP_M=1, num_warps=4,
                        num_stages=4 if bm == 64 else 3)
        return dict(BM=bm, BN=64, BK=128, GROUP_M=1, num_warps=4, num_stages=5)
    if (x_split == 1 and not w_fp8 and num_rows <= SPLIT_K_MAX_ROWS
            and out_features >= WIDE_BF16_MIN_OUT):
        return dict(BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=3)
    if w_fp8 and x_split != 3:  # one scale column per step: 3.48 vs 3.69 ms (BK 64, 3 stages)
        # for the slice's seven FP8 projections at 4,096 rows (session 12, round 49a,
        # bench/gemm_prefill_choice.py --bf16-configs; BM or BN 256 and BK 128 were slower)
        return dict(BM=128, BN=128, BK=32, GROUP_M=8, num_warps=8, num_stages=4)
    if x_split == 3:  # fp32 x or promoted bf16 x (the compressor's kv / gate projections)
        return dict(BM=FP32X_BM, BN=FP32X_BN, BK=64, GROUP_M=8, num_warps=FP32X_WARPS,
                    num_stages=FP32X_STAGES)
    return dict(BM=128, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=3 if w_fp8 else 4)


# linear_config's tiles for fp32 x / promoted bf16 x above 64 rows, read at the call (the
# ratio-2 compressors' kv / gate projections, [512, 5120] each). BK stays 64: each K chunk is
# one promotion, so BM / BN / warps leave a row's bits as they are; bench/route_compress.py
# times them. H100 round 197 (µs a call at 4,096 rows, BM:BN:WARPS:STAGES, the same bits in
# every row): 128:128:8:3 60.7 / 61.6 (before), 64:128:4:4 57.4 (this default), 64:128:4:3
# 59.4, 128:128:8:4 59.2, 128:64:4:4 61.0, 64:64:4:4 77.9
FP32X_BM = 64
FP32X_BN = 128
FP32X_WARPS = 4
FP32X_STAGES = 4


# bf16 x against FP8 block weights up to this many rows (on a GPU) runs
# ``linear_decode`` (the decoded weight on the MMA's M side, all rows on N); 0 turns it off
# (bench/kernel_overrides.py --linear-decode-rows, for A/B runs).
DECODE_KERNEL_MAX_ROWS = linear_decode.MAX_ROWS


# bf16 x against FP8 block weights from this many rows to ``WIDE_MAX_ROWS`` (on an SM90
# GPU) runs ``linear_wide`` (Gluon, TMA-fed, token tiles of up to 256 rows) instead of
# ``linear_decode``; 0 turns it off (bench/kernel_overrides.py --linear-wide-rows). Session 14
# round 65b (H200, decode, the projections' kernel time per step): 1.32 -> 0.87 ms at 64 x 4K,
# 2.59 -> 1.79 ms at 256 x 32K; below 64 rows not yet timed.
WIDE_MIN_ROWS = 64
# ... up to this many rows (None: any; above, the prefill tiles of ``_linear_kernel``;
# bench/kernel_overrides.py --linear-wide-max-rows). Session 14 round 67a (H200): the seven
# slice projections at 4,096 rows 2,704 -> 1,925 µs (bench/gemm_decode.py), the 4K prefill's
# FP8 projections 35.0 -> 23.7 ms per prefill (150.8 -> 142.5 ms in all, η 0.143 -> 0.152).
WIDE_MAX_ROWS: int | None = None


def _wide_applies(x3: torch.Tensor, weight: Any, out_features: int) -> bool:
    """Whether ``linear_wide`` takes this call (``WIDE_MIN_ROWS``..``WIDE_MAX_ROWS``, an SM90
    GPU, its shapes)."""
    rows = x3.shape[0]
    if not (WIDE_MIN_ROWS and WIDE_MIN_ROWS <= rows and x3.is_cuda
            and (WIDE_MAX_ROWS is None or rows <= WIDE_MAX_ROWS)):
        return False
    cfg = linear_wide.wide_config(rows, out_features, x3.shape[1])
    return (sm_major(x3.device) == 9
            and linear_wide.accepts(x3, weight, out_features, cfg["WG"]))


# bf16 x against an FP8 block weight with a resident bf16 twin (``Fp8BlockWeight.bf16``, where
# the plan has room: ``cache.prefill_bf16_weights``) from this many rows runs ``linear_ss``
# (both wgmma operands in shared memory) on the twin instead of ``linear_wide``: the same bits
# (neither splits K from ``gemm_fp8.INVARIANT_MIN_ROWS`` rows), 1,647 -> 1,328 µs for the seven
# slice projections at 4,096 rows (H100 round 230, bench/gemm_decode.py; torch.matmul on the
# twins 1,338). 0 turns it off (bench/kernel_overrides.py --launch-constant).
SS_MIN_ROWS = gemm_fp8.INVARIANT_MIN_ROWS


def _ss_applies(x3: torch.Tensor, weight: Any, out_features: int) -> bool:
    """Whether ``linear_ss`` takes this call: a twin, ``SS_MIN_ROWS`` rows, an SM90 GPU, its
    shapes."""
    return (isinstance(weight, Fp8BlockWeight) and weight.bf16 is not None
            and bool(SS_MIN_ROWS) and x3.shape[0] >= SS_MIN_ROWS and x3.is_cuda
            and sm_major(x3.device) == 9 and linear_ss.accepts(x3, weight.bf16, out_features))


def _bf16_exact(x: torch.Tensor) -> torch.Tensor:
    """A device flag bool (1,): whether every x holds a bf16 value — torch ops, no host sync."""
    return (x == x.to(torch.bfloat16).to(x.dtype)).all().reshape(1)


def _launch(x3: torch.Tensor, weight: torch.Tensor | Fp8BlockWeight, out_features: int,
            split_k: int | None = None, out_dtype: torch.dtype | None = None,
            config: dict | None = None, promoted: bool = False) -> torch.Tensor:
    """x3 (M, G, K) x weight (G * out_features, K) -> (M, G, out_features) in ``out_dtype``
    (default x3's dtype). ``config`` replaces ``linear_config``'s entries and keeps the call on
    ``_linear_kernel`` (bench/gemm_decode.py's tilings). ``promoted`` (bf16 x, bf16-exact
    weight): the fp32-x kernel's promoted sums on x as it is (``linear``)."""
    num_rows, groups, num_k = x3.shape
    out_dtype = out_dtype or x3.dtype
    if (split_k is None and config is None and out_dtype == x3.dtype and not promoted
            and not gemm_fp8.is_interpreting()):
        if _ss_applies(x3, weight, out_features):
            return linear_ss.linear_ss(x3, weight.bf16, out_features)
        if _wide_applies(x3, weight, out_features):
            return linear_wide.linear_wide(x3, weight, out_features)
        if num_rows <= DECODE_KERNEL_MAX_ROWS and linear_decode.supports(x3, weight):
            return linear_decode.linear_decode(x3, weight, out_features)
    if x3.stride(2) != 1:
        x3 = x3.contiguous()
    w, w_scale, w_fp8 = linear_decode.weight_operands(weight, "linear")
    assert w.dim() == 2 and w.shape[0] == groups * out_features and w.shape[1] == num_k, \
        f"linear: weight {tuple(w.shape)} does not match x {tuple(x3.shape)}"
    interpret = gemm_fp8.is_interpreting()
    bf16_exact_w = w_fp8 or w.dtype == torch.bfloat16
    x_split = _X_SPLIT.get(x3.dtype, 0) if bf16_exact_w else 0
    x_exact = promoted and x_split == 1  # bf16 x on the fp32-x kernel's loop and tiles
    if x_exact:
        x_split = _X_SPLIT[torch.float32]
    cfg = {**linear_config(num_rows, x_split, w_fp8, interpret, out_features), **(config or {})}
    out = torch.empty((num_rows, groups, out_features), dtype=out_dtype, device=x3.device)
    if num_rows == 0 or out_features == 0 or groups == 0:
        return out
    if num_k == 0:
        return out.zero_()
    bk = cfg["BK"]
    num_tiles = cdiv(num_rows, cfg["BM"]) * cdiv(out_features, cfg["BN"])
    if split_k is None:
        split_k = 1
        if num_rows <= 64 and not interpret:
            split_k = gemm_fp8.choose_split_k(num_tiles * groups, num_k, bk, NUM_SMS)
        elif num_rows <= SPLIT_K_MAX_ROWS and not interpret:
            split_k = gemm_fp8.split_k_for_waves(num_tiles * groups, num_k, bk,
                                                 1 if num_rows <= 128 else 2, NUM_SMS)
    k_per_split = cdiv(cdiv(num_k, bk), split_k) * bk
    split_k = cdiv(num_k, k_per_split)  # no empty splits
    target = out
    if split_k > 1:
        target = torch.empty((split_k, num_rows, groups, out_features), dtype=torch.float32,
                             device=x3.device)
    kc = FP8_TILE if w_fp8 else bk
    exact = x3  # unused unless x_split > 1 and not x_exact
    if x_split > 1 and not x_exact:  # a device flag (no host sync): x holds only bf16 values
        exact = _bf16_exact(x3)
    _linear_kernel[(num_tiles, split_k, groups)](
        x3, w, w_scale, exact, target,
        num_rows, out_features, num_k, k_per_split, num_rows * groups * out_features,
        x3.stride(0), x3.stride(1), w.stride(0), w_scale.stride(0) if w_fp8 else 0,
        groups * out_features, out_features,
        W_FP8=w_fp8, X_SPLIT=x_split, X_EXACT=x_exact, DOT_BF16=not interpret,
        EVEN_K=num_k % bk == 0,
        SPLIT_K=split_k, BM=cfg["BM"], BN=cfg["BN"], BK=bk, KC=kc, GROUP_M=cfg["GROUP_M"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if split_k > 1:
        total = num_rows * groups * out_features
        block = 1024
        gemm_fp8._splitk_sum_kernel[(cdiv(total, block),)](
            target, out, total, SPLIT_K=split_k, BLOCK=block, num_warps=4)
    return out


def linear(x: torch.Tensor, weight: torch.Tensor | Fp8BlockWeight | Mxfp4ExpertWeights,
           split_k: int | None = None, out_dtype: torch.dtype | None = None,
           promoted: bool = False) -> torch.Tensor:
    """Registered op: ``x @ weight^T``, (N, I) x (O, I) -> (N, O) in ``out_dtype`` (default x's
    dtype; fp32 accumulation).

    ``weight`` is a plain float tensor or an ``Fp8BlockWeight`` (dequantized in-kernel); a 1-expert
    ``Mxfp4ExpertWeights`` (which supports_linear declines) is dequantized to bf16 first. The
    logit head passes bf16 x with ``out_dtype=torch.float32``: one bf16 dot per step, the same
    products and fp32 sums as fp32 x holding those values, without the fp32-x kernel's second K
    loop (session 13, bench/gemm_head.py). ``promoted``: bf16 x summed as the fp32-x kernel
    sums x.float() — each K chunk in a fresh fp32 accumulator, then added (fp32-accurate; the
    head's truncating wgmma accumulation drifts ~1e-5 over K = 4096) — with those bits, without
    the fp32 copy of x and the device flag's passes over it (the compressor's fp32 projections).
    """
    assert x.dim() == 2, f"linear: x must be (N, I), got {tuple(x.shape)}"
    if isinstance(weight, Mxfp4ExpertWeights):
        weight = dense(weight)
    return _launch(x[:, None, :], weight, weight.shape[0], split_k, out_dtype,
                   promoted=promoted).view(x.shape[0], -1)


# FP8 projections above 64 rows: bf16 wgmma on the weight decoded in registers beat FP8 wgmma with
# per-32 promotion on every slice shape at 1,024 and 4,096 rows (1.1-2.0x) and on 6 of 7 at 256
# rows; the FP8 kernel won all 7 at 64 rows (H200, session 6 rounds 11-12,
# bench/gemm_prefill_choice.py; the bf16 path is also ~10x closer to the fp64 reference). With
# split-K at 65-256 rows (SPLIT_K_MAX_ROWS) the bf16 path also beat the FP8 decode tiles at 128
# rows: the seven slice projections, one call each, 185 vs 403 us, and 288 vs 494 us (bf16
# without split) at 256 (session 9 round 29, bench/gemm_decode.py). Below this row count the
# FP8 kernel (kernels/triton/gemm_fp8.py) keeps the call.
BF16_DECODE_MIN_ROWS = 65


def bf16_min_rows(x: torch.Tensor) -> int:
    """The row count from which Q8_32 projections of x take the bf16 path (the Q8_32 values in
    bf16 against the decoded weight) instead of the FP8 kernel on the codes: every row count
    where ``linear_decode`` runs (a GPU, the switch on), else ``BF16_DECODE_MIN_ROWS``."""
    if DECODE_KERNEL_MAX_ROWS and x.is_cuda and not gemm_fp8.is_interpreting():
        return 1
    return BF16_DECODE_MIN_ROWS


def linear_quant_act(x: torch.Tensor, weight: Fp8BlockWeight | torch.Tensor) -> torch.Tensor:
    """Registered op: Q8_32-round x, then GEMM against an FP8 weight; (N, I) -> (N, O) x.dtype.

    N >= ``bf16_min_rows(x)`` with an ``Fp8BlockWeight``: the rounded x in bf16 against the
    weight decoded in-kernel (``linear``; e4m3 x 2^k and Q8_32 values are exact in bf16, so both
    paths compute the same products with fp32 sums); otherwise ``gemm_fp8.linear_quant_act``.
    """
    if (isinstance(weight, Fp8BlockWeight) and x.dim() == 2 and x.dtype == torch.bfloat16
            and x.shape[0] >= bf16_min_rows(x)):
        return linear(quant_act.fake_quant_fp8_block32(x), weight)
    return gemm_fp8.linear_quant_act(x, weight)


def grouped_linear(x: torch.Tensor, weight: torch.Tensor | Fp8BlockWeight,
                   split_k: int | None = None) -> torch.Tensor:
    """Registered op: block-diagonal grouped projection (attention ``wo_a``).

    x (N, G, I), weight (G * O, I) plain or ``Fp8BlockWeight`` -> (N, G, O) in x's dtype.
    """
    assert x.dim() == 3, f"grouped_linear: x must be (N, G, I), got {tuple(x.shape)}"
    groups = x.shape[1]
    assert weight.shape[0] % groups == 0, \
        f"grouped_linear: {weight.shape[0]} weight rows do not split into {groups} groups"
    return _launch(x, weight, weight.shape[0] // groups, split_k)


_WEIGHT_FORMATS = ("dense", "dequantized", "plain", "fp8_block32")


def supports_linear(spec: dict) -> bool:
    """CUDA SM90+; ``weight_format`` (optional) plain ("dense"/"dequantized"/"plain") or
    "fp8_block32"; MXFP4 containers are declined (the reference dequantizes them)."""
    return quant_act.is_cuda_sm90_plus(spec) and spec.get("weight_format", "dense") in \
        _WEIGHT_FORMATS


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (format of tests/kernels/triton/conftest.py ``sm90_compile``) at
    V4.1-Flash shapes: the fp32-logit head (N=64, O=129280, I=4096: fp32 x, bf16 weight, bf16x3)
    at decode and N=256, and the head as the engine calls it at N=256 (bf16 x, fp32 logits: the
    wide tiles), bf16 linears at decode/prefill, and ``wo_a`` (G=8, I=4096, O=1024) with
    FP8 and bf16 weights."""
    cases = []
    for name, rows, x_ty, w_ty, w_fp8, split_k in (
            ("linear_head_fp32x_bf16w_n16", 16, "*fp32", "*bf16", False, 1),
            ("linear_head_fp32x_bf16w_n64", 64, "*fp32", "*bf16", False, 1),
            ("linear_head_fp32x_bf16w_n256", 256, "*fp32", "*bf16", False, 1),
            ("linear_head_bf16x_bf16w_n256", 256, "*bf16", "*bf16", False, 1),
            ("linear_bf16_decode_splitk", 16, "*bf16", "*bf16", False, 4),
            ("linear_bf16_prefill", 4096, "*bf16", "*bf16", False, 1),
            ("grouped_wo_a_fp8_decode_g8", 64, "*bf16", "*u8", True, 2),
            ("grouped_wo_a_fp8_prefill_g8", 4096, "*bf16", "*u8", True, 1),
            ("linear_fp32w_ieee_decode", 16, "*fp32", "*fp32", False, 1),
            ("linear_bf16x_promoted_compressor", 4096, "*bf16", "*bf16", False, 1),
            ("linear_bf16x_promoted_decode", 16, "*bf16", "*bf16", False, 1)):
        x_split = 0 if w_ty == "*fp32" else {"*bf16": 1, "*fp32": 3}[x_ty]
        x_split = 3 if "promoted" in name else x_split
        cfg = linear_config(rows, x_split, w_fp8, out_features=129280 if "head" in name else 0)
        cases.append({
            "id": name, "module": __name__, "kernel": "_linear_kernel",
            "signature": {"x_ptr": x_ty, "w_ptr": w_ty, "ws_ptr": "*u8", "exact_ptr": "*i1",
                          "out_ptr": ("*fp32" if split_k > 1 or "head" in name
                                      or "promoted" in name else x_ty),
                          "M": "i32", "O": "i32", "K": "i32", "k_per_split": "i32",
                          "split_stride": "i32", "stride_xm": "i32", "stride_xg": "i32",
                          "stride_wo": "i32", "stride_wsr": "i32", "stride_om": "i32",
                          "stride_og": "i32"},
            "constexprs": {"W_FP8": w_fp8, "X_SPLIT": x_split, "X_EXACT": "promoted" in name,
                           "DOT_BF16": True, "EVEN_K": True, "SPLIT_K": split_k,
                           "BM": cfg["BM"], "BN": cfg["BN"], "BK": cfg["BK"],
                           "KC": FP8_TILE if w_fp8 else cfg["BK"], "GROUP_M": cfg["GROUP_M"]},
            "num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"],
            "expect_wgmma": x_split > 0 and cfg["BM"] >= 64, "no_spill": True,
            "divisible": ["O", "K", "k_per_split"]})
    return cases
