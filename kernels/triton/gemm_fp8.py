"""Dense FP8 GEMM with 32×32 ue8m0 weight tiles and Q8_32 activations (model-spec §4.3).

    out[m, n] = sum_kb (sum_{k in kb} a[m, k] * w[n, k]) * 2^(ea[m, kb]-127) * 2^(ew[n//32, kb]-127)

a = Q8_32 codes of the input (one ue8m0 exponent per row per 32 K, from quant_act), w = e4m3 weight
codes with one ue8m0 exponent per 32×32 tile. The kernel walks K in steps of BK (a multiple of 32)
and issues one e4m3 ``tl.dot`` per 32-wide scale block, promoting each block's fp32 partial product
into the fp32 accumulator with its combined power-of-two scale (the DeepGEMM "promotion" scheme at
32 granularity, which DeepGEMM itself only offers on SM100). Every product and scale is exact, so
the result differs from the fp64 reference only by fp32 summation rounding before the final cast.

A weight may also be a plain float tensor (the dequantized bf16 weights the runtime holds today):
then the kernel dequantizes the activation block in registers (exact in bf16) and runs a bf16
``tl.dot``; semantics are the same (Q8_32 input, exact weights).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from deepinfer.kernels.quantized import Fp8BlockWeight
from deepinfer.kernels.triton import quant_act
from deepinfer.kernels.triton.launch_math import cdiv
from deepinfer.kernels.triton.quant_act import ue8m0_to_f32

SCALE_BLOCK = 32


def is_interpreting() -> bool:
    """True under TRITON_INTERPRET (CPU tests): bf16 dots are then computed in fp32."""
    try:
        return bool(triton.knobs.runtime.interpret)
    except AttributeError:  # pragma: no cover - older triton
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def pack_fp8_weight(w: torch.Tensor) -> Fp8BlockWeight:
    """Re-encode a dequantized FP8 weight (O, I) as codes + 32×32 tile scales (load time, exact)."""
    from deepinfer.kernels.formats import quantize_fp8_weight

    codes, scale = quantize_fp8_weight(w.cpu())
    return Fp8BlockWeight(codes.to(w.device), scale.to(w.device))


@triton.jit
def grouped_tile(pid, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """Program ``pid`` -> its (row tile, column tile) in grouped order: the up to GROUP_M row
    tiles of one column (weight) tile run next to each other, so that weight tile comes from
    HBM once and from L2 after."""
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group
    return pid_m, pid_n


@triton.jit
def _gemm_q8_kernel(
    a_ptr, a_scale_ptr,  # uint8 (M, K) e4m3 codes; uint8 (M, K/32) ue8m0
    w_ptr, w_scale_ptr,  # uint8 (N, K) e4m3 codes + uint8 (ceil(N/32), ceil(K/32)); or float (N, K)
    c_ptr,  # (M, N) output, any float dtype
    M, N, K, k_per_split,
    stride_am, stride_asm, stride_wn, stride_wsn, stride_cm,
    W_FP8: tl.constexpr,  # True: e4m3 weight with tile scales; False: plain float weight
    DOT_BF16: tl.constexpr,  # plain-weight path: bf16 dot (GPU) or fp32 dot (interpreter)
    SPLIT_K: tl.constexpr,  # > 1: program_id(1) takes K range [s * k_per_split, +k_per_split)
    # and stores fp32 partials to c_ptr + s * M * N (workspace), reduced by _splitk_sum_kernel
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BM, BN, GROUP_M)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, 32)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows_a = tl.where(mask_m, offs_m, 0).to(tl.int64)  # clamp instead of masking the loads
    rows_w = tl.where(mask_n, offs_n, 0).to(tl.int64)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + offs_k[None, :]  # [BM, 32]
    w_ptrs = w_ptr + rows_w[None, :] * stride_wn + offs_k[:, None]  # [32, BN] (K-major)
    a_scale_ptrs = a_scale_ptr + rows_a * stride_asm  # [BM]
    if W_FP8:
        w_scale_ptrs = w_scale_ptr + (rows_w // 32) * stride_wsn  # [BN]

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k_begin = tl.program_id(1) * k_per_split
    for k0 in range(k_begin, tl.minimum(k_begin + k_per_split, K), BK):
        for kk in tl.static_range(0, BK, 32):  # one scale block per dot
            kb = (k0 + kk) // 32
            a = tl.load(a_ptrs + (k0 + kk)).to(tl.float8e4nv, bitcast=True)
            a_scale = ue8m0_to_f32(tl.load(a_scale_ptrs + kb))
            if W_FP8:
                w = tl.load(w_ptrs + (k0 + kk)).to(tl.float8e4nv, bitcast=True)
                w_scale = ue8m0_to_f32(tl.load(w_scale_ptrs + kb))
                acc += tl.dot(a, w) * (a_scale[:, None] * w_scale[None, :])
            else:
                a_val = a.to(tl.float32) * a_scale[:, None]  # exact in bf16
                w = tl.load(w_ptrs + (k0 + kk))
                if DOT_BF16:
                    acc = tl.dot(a_val.to(tl.bfloat16), w.to(tl.bfloat16), acc)
                else:
                    acc = tl.dot(a_val, w.to(tl.float32), acc, input_precision="ieee")

    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    if SPLIT_K > 1:
        c_ptrs += tl.program_id(1).to(tl.int64) * M * N
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _splitk_sum_kernel(ws_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    """c = sum of the SPLIT_K fp32 partials (M*N each, contiguous), in split order."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def gemm_config(num_rows: int, w_fp8: bool, interpret: bool = False) -> dict:
    """Tile sizes: one config per shape class (no autotune, see kernels.md §3.3 rule 3).

    Decode with an FP8 weight, up to 128 rows (measured: bench/gemm_decode.py, H200 rounds
    24-25 of session 8, the slice's seven FP8 projections as CUDA graphs): up to 16 rows BM=16
    tiles (mma.sync; a 64-row wgmma tile spent 4x the promotions on padding), BN=128, BK=128
    (four 32-wide scale blocks per stage), 4 stages: 88 vs 465 us for one call of each shape
    at 1 row; up to 128 rows BM=64 (one wgmma M), BN=128, 4 stages: 142 vs 199 us at 64 rows,
    402 vs 644 us at 128 (the 128x128 prefill tile and BN=256 were slower). Split-K
    (choose_split_k, up to 64 rows) when the N tiles alone cannot fill the SMs (e.g. N=1024:
    8 tiles -> 8 splits). Plain weights keep 64x64 tiles, 6 stages.
    Prefill: 128×128 tiles, BK=32 (one scale block per step) and 6 stages: with BK=128 the four
    unrolled promotions spill registers at 128×128 (sm_90 res-usage, checked by the compile test).
    (The engram gather fused into this GEMM, ``engram_gather_linear`` — an op no default path
    called — was removed with its BN=64 prefill tiles: code at commit bf55292.)
    """
    if interpret:
        return dict(BM=16, BN=32, BK=64, GROUP_M=4, num_warps=4, num_stages=1)
    if num_rows <= 128 and w_fp8:
        return dict(BM=16 if num_rows <= 16 else 64, BN=128, BK=128, GROUP_M=1, num_warps=4,
                    num_stages=4)
    if num_rows <= 64:
        return dict(BM=64, BN=64, BK=128, GROUP_M=1, num_warps=4, num_stages=6)
    return dict(BM=128, BN=128, BK=32, GROUP_M=8, num_warps=8, num_stages=6 if w_fp8 else 4)


def choose_split_k(num_tiles: int, num_k: int, block_k: int, num_sms: int = 132) -> int:
    """Decode split-K: enough K partitions for ~one program per SM, each >= 4 BK steps, <= 8."""
    if num_tiles * 2 > num_sms:
        return 1
    return max(1, min(num_sms // num_tiles, num_k // (4 * block_k), 8))


# Batch invariance of prefill steps: from this many rows a launch's K partitions no longer follow
# the row count (``linear_wide.wide_split``, ``mhc.coeffs_split``), so a row's sums run in the same
# order whatever else shares its step, and a prompt prefilled in 4K or in 8K chunks gets the same
# bits (session 22 round 124a: wkv at 4,096 rows split K in 2 and at 8,192 not, the mHC
# coefficients 8 and 4 ways; the first token of 1 in 3 8K prompts flipped, bench/chunk_check.py).
INVARIANT_MIN_ROWS = 1024


def split_k_for_waves(num_tiles: int, num_k: int, block_k: int, waves: float,
                      num_sms: int = 132) -> int:
    """Split-K for ``waves`` x num_sms programs: ceil(waves * num_sms / num_tiles) K partitions,
    each >= 4 BK steps, <= 8 (1 when the tiles alone reach that many programs). For 65-256
    rows, where a few dozen output tiles each run a K loop of 40-64 steps (latency-bound: e.g.
    wq_a, N=1024, K=5120: 32 tiles of 64x128 at 256 rows)."""
    want = -(-int(waves * num_sms) // max(num_tiles, 1))
    return max(1, min(want, num_k // (4 * block_k), 8))


def gemm_q8(a_codes: torch.Tensor, a_scale: torch.Tensor, weight: Fp8BlockWeight | torch.Tensor,
            out_dtype: torch.dtype, split_k: int | None = None,
            config: dict | None = None) -> torch.Tensor:
    """(M, K) Q8_32 codes/scales (from quant_act.quant_q8_32) x weight (N, K) -> (M, N) out_dtype.
    ``config`` replaces ``gemm_config``'s tiling (benchmarks: bench/gemm_decode.py).
    """
    num_rows, num_k = a_codes.shape
    w_fp8 = isinstance(weight, Fp8BlockWeight)
    if w_fp8:
        assert weight.scale.element_size() == 1, "gemm_q8: FP8 weight scales must be ue8m0 bytes"
    w = weight.codes.view(torch.uint8) if w_fp8 else weight
    w_scale = weight.scale.view(torch.uint8) if w_fp8 else w  # unused when not w_fp8
    num_cols = w.shape[0]
    assert w.shape[1] == num_k and w.stride(1) == 1, \
        f"gemm_q8: weight {tuple(w.shape)} does not match K={num_k} (or is not row-major)"
    cfg = config or gemm_config(num_rows, w_fp8, is_interpreting())
    assert num_k % SCALE_BLOCK == 0, f"gemm_q8: K={num_k} must be a multiple of 32"
    out = torch.empty((num_rows, num_cols), dtype=out_dtype, device=a_codes.device)
    if num_rows == 0 or num_cols == 0:
        return out
    bk = cfg["BK"]
    while num_k % bk:
        bk //= 2  # K is a multiple of 32, so this stops at 32 at the latest
    num_tiles = cdiv(num_rows, cfg["BM"]) * cdiv(num_cols, cfg["BN"])
    if split_k is None:
        split_k = choose_split_k(num_tiles, num_k, bk) if num_rows <= 64 else 1
    k_per_split = cdiv(num_k // bk, split_k) * bk
    split_k = cdiv(num_k, k_per_split)  # no empty splits
    target = out
    if split_k > 1:
        target = torch.empty((split_k, num_rows, num_cols), dtype=torch.float32,
                             device=a_codes.device)
    _gemm_q8_kernel[(num_tiles, split_k)](
        a_codes, a_scale, w, w_scale, target,
        num_rows, num_cols, num_k, k_per_split,
        a_codes.stride(0), a_scale.stride(0), w.stride(0), w_scale.stride(0) if w_fp8 else 0,
        num_cols if split_k > 1 else out.stride(0),
        W_FP8=w_fp8, DOT_BF16=not is_interpreting(), SPLIT_K=split_k,
        BM=cfg["BM"], BN=cfg["BN"], BK=bk, GROUP_M=cfg["GROUP_M"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if split_k > 1:
        assert out.is_contiguous()
        block = 1024
        _splitk_sum_kernel[(cdiv(num_rows * num_cols, block),)](
            target, out, num_rows * num_cols, SPLIT_K=split_k, BLOCK=block, num_warps=4)
    return out


def linear_quant_act(x: torch.Tensor, weight: Fp8BlockWeight | torch.Tensor) -> torch.Tensor:
    """Registered op: Q8_32-quantize x, then GEMM against an FP8 weight; (N, I) -> (N, O) x.dtype.

    ``weight`` is an :class:`Fp8BlockWeight` (FP8 tensor-core path) or a plain float (O, I) tensor
    holding exactly dequantized FP8/FP4 values (bf16 tensor-core path). Two launches: the fused
    activation quantizer, then the GEMM.
    """
    assert x.dim() == 2 and x.shape[1] % SCALE_BLOCK == 0, \
        f"linear_quant_act: x must be (N, I) with I % 32 == 0, got {tuple(x.shape)}"
    a_codes, a_scale = quant_act.quant_q8_32(x.contiguous())
    return gemm_q8(a_codes, a_scale, weight, x.dtype)


def supports_linear_quant_act(spec: dict) -> bool:
    """CUDA SM90+; ``in_features`` (optional) a multiple of 32; ``weight_format`` (optional) one of
    "fp8_block32" (Fp8BlockWeight) or "dequantized" (plain float weight)."""
    return (quant_act.is_cuda_sm90_plus(spec)
            and spec.get("in_features", SCALE_BLOCK) % SCALE_BLOCK == 0
            and spec.get("weight_format", "fp8_block32") in ("fp8_block32", "dequantized"))
