"""Projections at decode sizes with the weight on the MMA's M side (reference ``linear.linear`` /
``linear.grouped_linear``; model-spec §4.3). ``kernels/triton/linear.py`` hands it bf16 x
against an ``Fp8BlockWeight`` below ``linear.WIDE_MIN_ROWS`` rows (64; more rows run
``linear_wide``, session 14; up to ``MAX_ROWS`` when that is off; ``linear_quant_act`` passes
the Q8_32-rounded x, exact in bf16). (fp32 x against the bf16 logit head ran here behind a switch
until session 13: 1.3-1.7x slower than ``linear._linear_kernel``, round 54c; the head now
passes bf16 x, commit history has that path.)

    out[t, g, o] = sum_k w[g * O + o, k] * x[t, g, k]

Why: the row-major tiles (``linear._linear_kernel``, ``gemm_fp8._gemm_q8_kernel``) put the few
token rows on the MMA's M side (64-row wgmma tiles, padded at 1-63 rows) and the weight on the
shared-memory B side, so every 32-K chunk of decoded weight goes registers -> shared -> tensor
core, once per M tile. Here a program owns BO weight rows (64 per warpgroup) against a token
tile (BT = the row count rounded up to 16..128, the wgmma N side; more rows: several tiles):

  * the weight tile [BO, 32] is decoded in registers (e4m3 x 2^(e-127): exact in bf16) and is
    the wgmma A operand there (no shared-memory round trip), read from HBM once per token tile;
  * x^T [32, BT] bf16 is the B operand through the pipelined shared-memory ring (from L2: every
    weight tile reads all of x, 2 BT / BO bytes per weight byte);
  * split-K (fp32 partials stored t-contiguous, the accumulator's own order, then summed in
    split order by ``_splitk_sum_t_kernel``) gives the few-tile shapes (wkv: 8 tiles of 64
    rows) enough programs to keep HBM busy.

Products are exact (bf16 x bf16 in fp32) and sums fp32, as in ``linear._linear_kernel``: the
same numbers up to summation order.

Shapes: x (M, G, K) bf16 with unit stride in K; w (G * O, K) uint8 e4m3 codes (ws
(ceil(G * O / 32), ceil(K / 32)) uint8 ue8m0); out (M, G, O) bf16 (or the fp32 workspace).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.quantized import Fp8BlockWeight
from deepinfer.kernels.triton import gemm_fp8
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2
from deepinfer.kernels.triton.quant_act import ue8m0_to_f32

MAX_ROWS = 256  # the engine's decode dispatch (``supports``); the widest token tile (wgmma N)
NUM_SMS = 132  # H200


@triton.jit
def load_chunk(x_ptrs, w_ptrs, ws_ptrs, k, k_end, offs_k, W_FP8: tl.constexpr,
               EVEN_K: tl.constexpr, W_ON_M: tl.constexpr):
    """One K chunk at offset k (32 wide for an FP8 weight: one scale column): x and the
    weight, an FP8 one decoded to fp32 (e4m3 x 2^(e-127): exact), any other as loaded. W_ON_M: w
    [rows, 32] and x^T [32, tokens] (``_linear_decode_kernel``); else x [tokens, 32] and w
    [32, cols] (``linear._linear_kernel``). K beyond k_end (not EVEN_K) loads as 0."""
    if EVEN_K:
        x = tl.load(x_ptrs + k)
        w = tl.load(w_ptrs + k)
    else:
        mask_k = k + offs_k < k_end
        if W_ON_M:
            x = tl.load(x_ptrs + k, mask=mask_k[:, None], other=0.0)
            w = tl.load(w_ptrs + k, mask=mask_k[None, :], other=0)
        else:
            x = tl.load(x_ptrs + k, mask=mask_k[None, :], other=0.0)
            w = tl.load(w_ptrs + k, mask=mask_k[:, None], other=0)
    if W_FP8:
        if EVEN_K:
            scale = ue8m0_to_f32(tl.load(ws_ptrs + k // 32))
        else:
            scale = ue8m0_to_f32(tl.load(ws_ptrs + k // 32, mask=k < k_end, other=127))
        w = w.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        if W_ON_M:
            w = w * scale[:, None]
        else:
            w = w * scale[None, :]
    return x, w


@triton.jit
def _decode_k_loop(acc, x_ptrs, w_ptrs, ws_ptrs, offs_k, k_begin, k_end, DOT_BF16: tl.constexpr,
                   EVEN_K: tl.constexpr, BK: tl.constexpr):
    """acc [BO, BT] += w[:, k_begin:k_end] @ x^T[k_begin:k_end, :] in 32-K chunks (one scale
    column of the FP8 weight each)."""
    for k0 in range(k_begin, k_end, BK):
        for kk in tl.static_range(0, BK, 32):
            x, wf = load_chunk(x_ptrs, w_ptrs, ws_ptrs, k0 + kk, k_end, offs_k, True, EVEN_K,
                               True)
            acc = dot_exact(wf, x, acc, DOT_BF16)
    return acc


@triton.jit
def dot_exact(a, b, acc, DOT_BF16: tl.constexpr):
    """acc + a @ b for bf16-exact a and b (held in any float type): bf16 tensor cores, or an
    fp32 "ieee" dot (the interpreter). Every product is exact in fp32."""
    if DOT_BF16:
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)
    return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")


@triton.jit
def _linear_decode_kernel(
    x_ptr,  # (M, G, K) bf16, unit stride in K
    w_ptr,  # (G * O, K) uint8 e4m3 codes
    ws_ptr,  # (ceil(G * O / 32), ceil(K / 32)) uint8 ue8m0: 32x32 tiles
    out_ptr,  # (M, G, O) output, or the fp32 workspace (SPLIT_K, G, O, T_TILES * BT)
    M, O, K, k_per_split, split_stride,
    stride_xm, stride_xg, stride_wo, stride_wsr, stride_om, stride_og,
    EVEN_K: tl.constexpr,  # K % BK == 0 and k_per_split % BK == 0: no K masks
    SPLIT_K: tl.constexpr,
    T_TILES: tl.constexpr,  # token tiles of BT rows (adjacent programs: one weight tile)
    BO: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    DOT_BF16: tl.constexpr,  # bf16 tensor cores (GPU) or fp32 dots (the interpreter)
):
    pid_o = tl.program_id(0) // T_TILES
    t_tile = tl.program_id(0) % T_TILES
    split = tl.program_id(1)
    group = tl.program_id(2)
    offs_o = pid_o * BO + tl.arange(0, BO)
    offs_t = t_tile * BT + tl.arange(0, BT)
    offs_k = tl.arange(0, 32)
    mask_o = offs_o < O
    mask_t = offs_t < M
    # clamped rows instead of load masks: the padding columns / rows are never stored
    rows_w = (group * O + tl.where(mask_o, offs_o, 0)).to(tl.int64)
    rows_x = tl.where(mask_t, offs_t, 0).to(tl.int64)
    w_ptrs = w_ptr + rows_w[:, None] * stride_wo + offs_k[None, :]  # [BO, 32]
    x_off = group.to(tl.int64) * stride_xg + rows_x[None, :] * stride_xm + offs_k[:, None]
    ws_ptrs = ws_ptr + (rows_w // 32) * stride_wsr  # [BO]

    acc = tl.zeros((BO, BT), dtype=tl.float32)
    k_begin = split * k_per_split
    k_end = tl.minimum(k_begin + k_per_split, K)
    acc = _decode_k_loop(acc, x_ptr + x_off, w_ptrs, ws_ptrs, offs_k, k_begin, k_end,
                         DOT_BF16, EVEN_K, BK)

    if SPLIT_K > 1:  # workspace (SPLIT_K, G, O, T_TILES * BT): t contiguous (the accumulator's)
        out_ptrs = (out_ptr + split.to(tl.int64) * split_stride
                    + (group * O + offs_o).to(tl.int64)[:, None] * (T_TILES * BT)
                    + offs_t[None, :])
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
    """Tiles per row class (no autotune, kernels.md §3.3 rule 3). bf16 x: BT = rows rounded up
    to 16..256 (one token tile); BO 64 (one warpgroup), BK 32 (one scale column per pipeline
    step), 4 stages, split-K for 2 waves of programs. H200, the slice's seven projections one
    call each (session 12 round 47, bench/gemm_decode.py): 86.7 / 118.7 / 150.1 / 261.3 µs at
    1 / 64 / 128 / 256 rows, against 87.2 / 140.2 (gemm_q8) and 183.6 / 285.7 (the row-major
    bf16 tiles, split-K) before; BO 128 (two warpgroups), BK 64 / 128 and 3 / 6 stages were
    5-40 % slower at every row count. Above 128 rows: token tiles of 128 (BT 256 takes 190
    registers, 2 programs per SM; BT 128 116, 4): 264.4 -> 245.9 µs at 256 rows (session 13
    round 57a; 8 warps on BT 256, BO 128, one wave, 6 stages: 7-30 % slower), and split-K for
    3 waves: 246.3 -> 232.7 (round 58a; BT 64, BK 64, 3 / 5 stages: slower)."""
    bt = min(MAX_ROWS, max(16, next_power_of_2(max(num_rows, 1))))
    if interpret:
        return dict(BO=32, BT=min(bt, 64), BK=32, num_warps=4, num_stages=1, waves=1)
    return dict(BO=64, BT=min(bt, 128), BK=32, num_warps=4, num_stages=4,
                waves=3 if num_rows > 128 else 2)


def supports(x3: torch.Tensor, weight: Any) -> bool:
    """``accepts`` on a CUDA device (the kernel's dispatch from ``linear``)."""
    return x3.is_cuda and accepts(x3, weight)


def accepts(x3: torch.Tensor, weight: Any) -> bool:
    """bf16 x (M, G, K) with 1 <= M <= MAX_ROWS against an Fp8BlockWeight."""
    return (0 < x3.shape[0] <= MAX_ROWS and x3.shape[2] > 0 and x3.dtype == torch.bfloat16
            and isinstance(weight, Fp8BlockWeight))


def weight_operands(weight: Fp8BlockWeight | torch.Tensor, who: str
                    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(w, w_scale, is_fp8) for a kernel launch: an ``Fp8BlockWeight``'s e4m3 codes and ue8m0
    scales as uint8; a plain weight row-major, and itself in the scale's place (unused)."""
    if isinstance(weight, Fp8BlockWeight):
        assert weight.scale.element_size() == 1, f"{who}: FP8 weight scales must be ue8m0 bytes"
        return weight.codes.view(torch.uint8), weight.scale.view(torch.uint8), True
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    return w, w, False


def linear_decode(x3: torch.Tensor, weight: Fp8BlockWeight, out_features: int,
                  split_k: int | None = None, config: dict | None = None) -> torch.Tensor:
    """bf16 x3 (M, G, K) x FP8 block weight (G * out_features, K) -> (M, G, out_features)
    bf16, any M (token tiles of at most MAX_ROWS rows; the engine sends it 1-MAX_ROWS,
    ``supports``). ``config`` replaces ``decode_config``'s entries (bench/gemm_decode.py)."""
    num_rows, groups, num_k = x3.shape
    assert x3.dtype == torch.bfloat16, f"linear_decode: x is {x3.dtype}, expected bf16"
    w, w_scale, w_fp8 = weight_operands(weight, "linear_decode")
    assert w_fp8, "linear_decode: the weight must be an Fp8BlockWeight"
    assert w.dim() == 2 and w.shape[0] == groups * out_features and w.shape[1] == num_k, \
        f"linear_decode: weight {tuple(w.shape)} does not match x {tuple(x3.shape)}"
    assert w.stride(1) == 1, "linear_decode: the weight must be row-major"
    interpret = gemm_fp8.is_interpreting()
    cfg = {**decode_config(num_rows, interpret), **(config or {})}
    out = torch.empty((num_rows, groups, out_features), dtype=x3.dtype, device=x3.device)
    if num_rows == 0 or out_features == 0 or groups == 0:
        return out
    if x3.stride(2) != 1:
        x3 = x3.contiguous()
    bk, bt = cfg["BK"], cfg["BT"]
    t_tiles = cdiv(num_rows, bt)
    num_tiles = cdiv(out_features, cfg["BO"]) * groups * t_tiles
    if split_k is None:
        split_k = gemm_fp8.split_k_for_waves(num_tiles, num_k, bk, cfg["waves"], NUM_SMS)
    k_per_split = cdiv(cdiv(num_k, bk), split_k) * bk
    split_k = cdiv(num_k, k_per_split)  # no empty splits
    ws_row = t_tiles * bt  # the workspace's t extent
    target = out
    if split_k > 1:
        target = torch.empty((split_k, groups, out_features, ws_row), dtype=torch.float32,
                             device=x3.device)
    _linear_decode_kernel[(cdiv(out_features, cfg["BO"]) * t_tiles, split_k, groups)](
        x3, w, w_scale, target, num_rows, out_features, num_k, k_per_split,
        groups * out_features * ws_row, x3.stride(0), x3.stride(1), w.stride(0),
        w_scale.stride(0), out.stride(0), out.stride(1),
        EVEN_K=num_k % bk == 0 and k_per_split % bk == 0, SPLIT_K=split_k, T_TILES=t_tiles,
        BO=cfg["BO"], BT=bt, BK=bk, DOT_BF16=not interpret, num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"])
    if split_k > 1:
        block_o, block_t = 64, min(bt, 64)
        _splitk_sum_t_kernel[(cdiv(out_features, block_o), cdiv(num_rows, block_t),
                              groups)](
            target, out, num_rows, out_features, groups * out_features * ws_row, out.stride(0),
            out.stride(1), SPLIT_K=split_k, BT=ws_row, BLOCK_O=block_o, BLOCK_T=block_t,
            num_warps=4)
    return out


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/conftest.py ``sm90_compile``): bf16 x
    against FP8 weights for every row class at V4.1-Flash shapes (K = 5120), split and not, and
    a 4,096-row call (32 token tiles: the prefill-size variant bench/gemm_prefill_choice.py
    times); wgmma, no spills."""
    cases = []
    for rows, split_k in ((1, 4), (16, 1), (64, 2), (128, 2), (256, 1), (256, 4), (4096, 1)):
        cfg = decode_config(rows)
        cases.append({
            "id": f"linear_decode_rows{rows}_split{split_k}",
            "module": __name__, "kernel": "_linear_decode_kernel",
            "signature": {"x_ptr": "*bf16", "w_ptr": "*u8", "ws_ptr": "*u8",
                          "out_ptr": "*fp32" if split_k > 1 else "*bf16",
                          "M": "i32", "O": "i32", "K": "i32", "k_per_split": "i32",
                          "split_stride": "i32", "stride_xm": "i32", "stride_xg": "i32",
                          "stride_wo": "i32", "stride_wsr": "i32", "stride_om": "i32",
                          "stride_og": "i32"},
            "constexprs": {"EVEN_K": True, "SPLIT_K": split_k,
                           "T_TILES": cdiv(rows, cfg["BT"]), "BO": cfg["BO"],
                           "BT": cfg["BT"], "BK": cfg["BK"], "DOT_BF16": True},
            "num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"],
            "expect_wgmma": True, "no_spill": True,
            "divisible": ["O", "K", "k_per_split"]})
    return cases
