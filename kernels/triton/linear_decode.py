"""FP8 block-scaled projections at decode sizes (1-256 rows) with the weight on the MMA's M side
(reference ``linear.linear`` / ``linear.grouped_linear`` on the dequantized weight; model-spec
§4.3). ``kernels/triton/linear.py`` hands it bf16 x against an ``Fp8BlockWeight`` up to
``MAX_ROWS`` rows (``linear_quant_act`` passes the Q8_32-rounded x, exact in bf16).

    out[t, g, o] = sum_k w[g * O + o, k] * x[t, g, k]

Why: the row-major tiles (``linear._linear_kernel``, ``gemm_fp8._gemm_q8_kernel``) put the few
token rows on the MMA's M side (64-row wgmma tiles, padded at 1-63 rows) and the weight on the
shared-memory B side, so every 32-K chunk of decoded weight goes registers -> shared -> tensor
core, once per M tile. Here a program owns BO weight rows (64 per warpgroup) against all the
tokens (BT = the row count rounded up to 16..256, the wgmma N side):

  * the weight tile [BO, 32] is decoded in registers (e4m3 x 2^(e-127): exact in bf16) and is
    the wgmma A operand there (no shared-memory round trip), read from HBM exactly once;
  * x^T [32, BT] bf16 is the B operand through the pipelined shared-memory ring (from L2: every
    weight tile reads all of x, 2 BT / BO bytes per weight byte);
  * split-K (fp32 partials stored t-contiguous, the accumulator's own order, then summed in
    split order by ``_splitk_sum_t_kernel``) gives the few-tile shapes (wkv: 8 tiles of 64
    rows) enough programs to keep HBM busy.

Products are exact (bf16 x bf16 in fp32) and sums fp32 in the wgmma accumulator, as in
``linear._linear_kernel``'s bf16 path: the same numbers up to summation order.

Shapes: x (M, G, K) bf16 with unit stride in K; w (G * O, K) uint8 e4m3 codes; ws
(ceil(G * O / 32), ceil(K / 32)) uint8 ue8m0; out (M, G, O) bf16 (or the fp32 workspace).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.quantized import Fp8BlockWeight
from deepinfer.kernels.triton import gemm_fp8
from deepinfer.kernels.triton.quant_act import ue8m0_to_f32

MAX_ROWS = 256  # the wgmma N side holds every token row
NUM_SMS = 132  # H200
SCALE_TILE = 32  # rows and columns per ue8m0 weight scale


@triton.jit
def _linear_decode_kernel(
    x_ptr,  # (M, G, K) bf16, unit stride in K
    w_ptr,  # (G * O, K) uint8 e4m3 codes
    ws_ptr,  # (ceil(G * O / 32), ceil(K / 32)) uint8 ue8m0
    out_ptr,  # (M, G, O) output, or the fp32 workspace (SPLIT_K, G, O, BT)
    M, O, K, k_per_split, split_stride,
    stride_xm, stride_xg, stride_wo, stride_wsr, stride_om, stride_og,
    EVEN_K: tl.constexpr,  # K % BK == 0 and k_per_split % BK == 0: no K masks
    SPLIT_K: tl.constexpr,
    BO: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    DOT_BF16: tl.constexpr,  # bf16 tensor cores (GPU) or fp32 dots (the interpreter)
):
    pid_o = tl.program_id(0)
    split = tl.program_id(1)
    group = tl.program_id(2)
    offs_o = pid_o * BO + tl.arange(0, BO)
    offs_t = tl.arange(0, BT)
    offs_k = tl.arange(0, 32)
    mask_o = offs_o < O
    mask_t = offs_t < M
    # clamped rows instead of load masks: the padding columns / rows are never stored
    rows_w = (group * O + tl.where(mask_o, offs_o, 0)).to(tl.int64)
    rows_x = tl.where(mask_t, offs_t, 0).to(tl.int64)
    w_ptrs = w_ptr + rows_w[:, None] * stride_wo + offs_k[None, :]  # [BO, 32]
    x_ptrs = (x_ptr + group.to(tl.int64) * stride_xg + rows_x[None, :] * stride_xm
              + offs_k[:, None])  # [32, BT]: x^T
    ws_ptrs = ws_ptr + (rows_w // 32) * stride_wsr  # [BO]

    acc = tl.zeros((BO, BT), dtype=tl.float32)
    k_begin = split * k_per_split
    k_end = tl.minimum(k_begin + k_per_split, K)
    for k0 in range(k_begin, k_end, BK):
        for kk in tl.static_range(0, BK, 32):  # one scale column per 32-K chunk
            k = k0 + kk
            if EVEN_K:
                w = tl.load(w_ptrs + k)
                x = tl.load(x_ptrs + k)
                scale = ue8m0_to_f32(tl.load(ws_ptrs + k // 32))
            else:
                mask_k = k + offs_k < k_end
                w = tl.load(w_ptrs + k, mask=mask_k[None, :], other=0)
                x = tl.load(x_ptrs + k, mask=mask_k[:, None], other=0.0)
                scale = ue8m0_to_f32(tl.load(ws_ptrs + k // 32, mask=k < k_end, other=127))
            wf = w.to(tl.float8e4nv, bitcast=True).to(tl.float32) * scale[:, None]  # exact
            if DOT_BF16:
                acc = tl.dot(wf.to(tl.bfloat16), x.to(tl.bfloat16), acc)
            else:
                acc = tl.dot(wf, x.to(tl.float32), acc, input_precision="ieee")

    if SPLIT_K > 1:  # workspace (SPLIT_K, G, O, BT): t contiguous, the accumulator's own order
        out_ptrs = (out_ptr + split.to(tl.int64) * split_stride
                    + (group * O + offs_o).to(tl.int64)[:, None] * BT + offs_t[None, :])
    else:
        out_ptrs = (out_ptr + group.to(tl.int64) * stride_og
                    + offs_t.to(tl.int64)[None, :] * stride_om + offs_o[:, None])
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask_o[:, None] & mask_t[None, :])


@triton.jit
def _splitk_sum_t_kernel(ws_ptr, out_ptr, M, O, split_stride, stride_om, stride_og,
                         SPLIT_K: tl.constexpr, BT: tl.constexpr, BLOCK_O: tl.constexpr,
                         BLOCK_T: tl.constexpr):
    """out[t, g, o] = sum over s in order of ws[s, g, o, t] (fp32 from 0, one rounding)."""
    group = tl.program_id(2)
    offs_o = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)
    offs_t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    mask = (offs_o < O)[:, None] & (offs_t < M)[None, :]
    ptrs = ws_ptr + (group * O + offs_o).to(tl.int64)[:, None] * BT + offs_t[None, :]
    acc = tl.zeros((BLOCK_O, BLOCK_T), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(ptrs + s * split_stride, mask=mask, other=0.0)
    out_ptrs = (out_ptr + group.to(tl.int64) * stride_og + offs_t.to(tl.int64)[None, :] * stride_om
                + offs_o[:, None])
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def decode_config(num_rows: int, interpret: bool = False) -> dict:
    """Tiles per row class (no autotune, kernels.md §3.3 rule 3): BT = rows rounded up to
    16..256; BO 64 (one warpgroup), BK 32 (one scale column per pipeline step), 4 stages, split-K
    for 2 waves of programs. H200, the slice's seven projections one call each (session 12
    round 47, bench/gemm_decode.py): 86.7 / 118.7 / 150.1 / 261.3 µs at 1 / 64 / 128 / 256 rows,
    against 87.2 / 140.2 (gemm_q8) and 183.6 / 285.7 (the row-major bf16 tiles, split-K) before;
    BO 128 (two warpgroups), BK 64 / 128 and 3 / 6 stages were 5-40 % slower at every row
    count."""
    bt = max(16, triton.next_power_of_2(max(num_rows, 1)))
    if interpret:
        return dict(BO=32, BT=bt, BK=32, num_warps=4, num_stages=1, waves=1)
    return dict(BO=64, BT=bt, BK=32, num_warps=4, num_stages=4, waves=2)


def supports(x3: torch.Tensor, weight: Any) -> bool:
    """bf16 x (M, G, K) with 1 <= M <= MAX_ROWS on a CUDA device against an Fp8BlockWeight."""
    return (isinstance(weight, Fp8BlockWeight) and x3.dtype == torch.bfloat16 and x3.is_cuda
            and 0 < x3.shape[0] <= MAX_ROWS and x3.shape[2] > 0)


def linear_decode(x3: torch.Tensor, weight: Fp8BlockWeight, out_features: int,
                  split_k: int | None = None, config: dict | None = None) -> torch.Tensor:
    """x3 (M, G, K) bf16 x weight (G * out_features, K) FP8 -> (M, G, out_features) bf16.
    ``config`` replaces ``decode_config``'s entries (benchmarks: bench/gemm_decode.py)."""
    num_rows, groups, num_k = x3.shape
    assert num_rows <= MAX_ROWS, f"linear_decode: {num_rows} rows > {MAX_ROWS}"
    if x3.stride(2) != 1:
        x3 = x3.contiguous()
    assert weight.scale.element_size() == 1, "linear_decode: FP8 weight scales must be ue8m0"
    w = weight.codes.view(torch.uint8)
    w_scale = weight.scale.view(torch.uint8)
    assert w.dim() == 2 and w.shape[0] == groups * out_features and w.shape[1] == num_k, \
        f"linear_decode: weight {tuple(w.shape)} does not match x {tuple(x3.shape)}"
    assert w.stride(1) == 1, "linear_decode: the weight must be row-major"
    interpret = gemm_fp8.is_interpreting()
    cfg = {**decode_config(num_rows, interpret), **(config or {})}
    out = torch.empty((num_rows, groups, out_features), dtype=x3.dtype, device=x3.device)
    if num_rows == 0 or out_features == 0 or groups == 0:
        return out
    bk = cfg["BK"]
    num_tiles = triton.cdiv(out_features, cfg["BO"]) * groups
    if split_k is None:
        split_k = gemm_fp8.split_k_for_waves(num_tiles, num_k, bk, cfg["waves"], NUM_SMS)
    k_per_split = triton.cdiv(triton.cdiv(num_k, bk), split_k) * bk
    split_k = triton.cdiv(num_k, k_per_split)  # no empty splits
    bt = cfg["BT"]
    target = out
    if split_k > 1:
        target = torch.empty((split_k, groups, out_features, bt), dtype=torch.float32,
                             device=x3.device)
    _linear_decode_kernel[(triton.cdiv(out_features, cfg["BO"]), split_k, groups)](
        x3, w, w_scale, target, num_rows, out_features, num_k, k_per_split,
        groups * out_features * bt, x3.stride(0), x3.stride(1), w.stride(0),
        w_scale.stride(0), out.stride(0), out.stride(1),
        EVEN_K=num_k % bk == 0 and k_per_split % bk == 0, SPLIT_K=split_k, BO=cfg["BO"],
        BT=bt, BK=bk, DOT_BF16=not interpret, num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"])
    if split_k > 1:
        block_o, block_t = 64, min(bt, 64)
        _splitk_sum_t_kernel[(triton.cdiv(out_features, block_o), triton.cdiv(num_rows, block_t),
                              groups)](
            target, out, num_rows, out_features, groups * out_features * bt, out.stride(0),
            out.stride(1), SPLIT_K=split_k, BT=bt, BLOCK_O=block_o, BLOCK_T=block_t,
            num_warps=4)
    return out


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/conftest.py ``sm90_compile``) for every
    row class at V4.1-Flash shapes (K = 5120), split and not; wgmma and no spills expected."""
    cases = []
    for rows, split_k in ((1, 4), (16, 1), (64, 2), (128, 2), (256, 1), (256, 4)):
        cfg = decode_config(rows)
        cases.append({
            "id": f"linear_decode_rows{rows}_split{split_k}", "module": __name__,
            "kernel": "_linear_decode_kernel",
            "signature": {"x_ptr": "*bf16", "w_ptr": "*u8", "ws_ptr": "*u8",
                          "out_ptr": "*fp32" if split_k > 1 else "*bf16",
                          "M": "i32", "O": "i32", "K": "i32", "k_per_split": "i32",
                          "split_stride": "i32", "stride_xm": "i32", "stride_xg": "i32",
                          "stride_wo": "i32", "stride_wsr": "i32", "stride_om": "i32",
                          "stride_og": "i32"},
            "constexprs": {"EVEN_K": True, "SPLIT_K": split_k, "BO": cfg["BO"], "BT": cfg["BT"],
                           "BK": cfg["BK"], "DOT_BF16": True},
            "num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"],
            "expect_wgmma": True, "no_spill": True,
            "divisible": ["O", "K", "k_per_split"]})
    return cases
