"""MoE router (model-spec §2.8; reference ``moe.route_sqrtsoftplus`` with ``stable_topk`` ties).

Two launches:
  1. ``_route_scores_kernel``: the gate GEMM tiled over (BM tokens, BE experts), fp32 accumulation
     over D (bf16 ``tl.dot`` on the GPU, fp32 in the interpreter), epilogue
         s = sqrt(softplus(logits / gate_temp))         (IEEE sqrt and division)
     stored as fp32 scores (N, E). Tiling over experts keeps decode batches (a few dozen tokens)
     spread over many SMs; the round trip costs N * E * 4 bytes (6 MiB at 4096 tokens).
  2. ``_route_topk_kernel``: BT tokens × all experts (E padded to a power of two) in registers:
         sel = s + (bias_vl if image token else bias)
         TOPK rounds of: m = max(sel); id = smallest column with sel == m; sel[id] = -inf
           -> the k largest, ties to the lower expert id, in descending order (a stable sort)
         w = s[ids] / (sum + 1e-20) * route_scale       (normalized only if NORMALIZE, topk > 1)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import quant_act
from deepinfer.kernels.triton.gemm_fp8 import is_interpreting
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2


@triton.jit
def _softplus(x):
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)), log1p by series when tiny."""
    u = tl.exp(-tl.abs(x))
    log1p_u = tl.where(u < 1e-4, u - 0.5 * u * u, tl.log(1.0 + u))
    return tl.maximum(x, 0.0) + log1p_u


@triton.jit
def _route_scores_kernel(x_ptr, gate_ptr, scores_ptr, N, E, D, stride_xm, stride_ge, stride_sm,
                         gate_temp, DOT_BF16: tl.constexpr, BM: tl.constexpr, BE: tl.constexpr,
                         BK: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_e = tl.program_id(1) * BE + tl.arange(0, BE)
    mask_m = offs_m < N
    mask_e = offs_e < E
    rows = tl.where(mask_m, offs_m, 0).to(tl.int64)
    experts = tl.where(mask_e, offs_e, 0).to(tl.int64)
    offs_k = tl.arange(0, BK)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :]  # [BM, BK]
    g_ptrs = gate_ptr + experts[None, :] * stride_ge + offs_k[:, None]  # [BK, BE] (K-major)
    logits = tl.zeros((BM, BE), dtype=tl.float32)
    for k0 in range(0, D, BK):
        a = tl.load(x_ptrs + k0)
        b = tl.load(g_ptrs + k0)
        if DOT_BF16:
            logits = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), logits)
        else:
            logits = tl.dot(a.to(tl.float32), b.to(tl.float32), logits, input_precision="ieee")
    temp = tl.full((BM, BE), gate_temp, tl.float32)
    scores = tl.sqrt_rn(_softplus(tl.math.div_rn(logits, temp)))
    tl.store(scores_ptr + rows[:, None] * stride_sm + offs_e[None, :], scores,
             mask=mask_m[:, None] & mask_e[None, :])


@triton.jit
def _route_topk_kernel(scores_ptr, bias_ptr, bias_vl_ptr, image_mask_ptr, weights_ptr, ids_ptr,
                       N, E, stride_sm, route_scale,
                       HAS_IMAGE: tl.constexpr, NORMALIZE: tl.constexpr, TOPK: tl.constexpr,
                       KP: tl.constexpr, BT: tl.constexpr, E_PAD: tl.constexpr):
    offs_m = tl.program_id(0) * BT + tl.arange(0, BT)
    mask_m = offs_m < N
    rows = tl.where(mask_m, offs_m, 0).to(tl.int64)
    cols = tl.arange(0, E_PAD)
    mask_e = cols < E
    scores = tl.load(scores_ptr + rows[:, None] * stride_sm + cols[None, :],
                     mask=mask_e[None, :], other=0.0)
    bias = tl.load(bias_ptr + cols, mask=mask_e, other=0.0)
    sel = scores + bias[None, :]
    if HAS_IMAGE:
        bias_vl = tl.load(bias_vl_ptr + cols, mask=mask_e, other=0.0)
        is_image = tl.load(image_mask_ptr + rows).to(tl.int32) != 0
        sel = tl.where(is_image[:, None], scores + bias_vl[None, :], sel)
    sel = tl.where(mask_e[None, :], sel, float("-inf"))

    slots = tl.arange(0, KP)
    top_ids = tl.zeros((BT, KP), dtype=tl.int32)
    top_w = tl.zeros((BT, KP), dtype=tl.float32)
    total = tl.zeros((BT,), dtype=tl.float32)
    for k in tl.static_range(TOPK):
        best = tl.max(sel, axis=1)
        idx = tl.min(tl.where(sel == best[:, None], cols[None, :], E_PAD), axis=1)  # lowest id
        hit = cols[None, :] == idx[:, None]
        w = tl.sum(tl.where(hit, scores, 0.0), axis=1)
        sel = tl.where(hit, float("-inf"), sel)
        top_ids = tl.where(slots[None, :] == k, idx[:, None], top_ids)
        top_w = tl.where(slots[None, :] == k, w[:, None], top_w)
        total += w
    if NORMALIZE:
        top_w = tl.math.div_rn(top_w, (total + 1e-20)[:, None] + tl.zeros((BT, KP), tl.float32))
    top_w = top_w * route_scale
    out_mask = mask_m[:, None] & (slots[None, :] < TOPK)
    out_off = rows[:, None] * TOPK + slots[None, :]
    tl.store(ids_ptr + out_off, top_ids.to(tl.int64), mask=out_mask)
    tl.store(weights_ptr + out_off, top_w, mask=out_mask)


# Token counts up to which the scores take decode tiles: BM 16 x BE 16 up to 64 tokens (384
# experts: 24 programs per 16 tokens), BM 16 x BE 32 up to this many (256 tokens: 192 programs;
# the prefill tiles, 64 x 64, made 24 programs of 80 K steps there: 26 µs per call, 0.21 ms of
# the 256 x 32K decode step, session 21 round 117a).
ROUTE_DECODE_MAX_TOKENS = 256
# the scores' prefill tiles (above ROUTE_DECODE_MAX_TOKENS), read at the call: BM tokens (the
# wgmma M side) x BE experts, BK-column steps. Any tiling gives a token the same bits (every
# logit sums its K steps in order, each on the same k16 instructions); bench/route_compress.py
# times them at a 4K prompt's shape. H100 round 197 (µs a call, BM:BE:BK:WARPS:STAGES, the same
# bits in every row): 64:64:64:4:4 83.5 / 82.6 (before), 64:128:64:4:4 74.2 (this default),
# 64:128:64:4:3 78.7, 128:128:64:8:3 81.9, 128:64:64:8:4 96.6, 64:64:128:4:3 100.0
PREFILL_BM = 64
PREFILL_BE = 128
# below this many programs at PREFILL_BE (a wave of the H100's / H200's 132 SMs: 2,048 tokens
# and fewer at 384 experts) the experts' tiles narrow to PREFILL_NARROW_BE (session 39's 64,
# twice the programs)
PREFILL_MIN_PROGRAMS = 132
PREFILL_NARROW_BE = 64
PREFILL_BK = 64
PREFILL_WARPS = 4
PREFILL_STAGES = 4


def route_config(num_tokens: int, num_experts: int, interpret: bool = False) -> dict:
    """Scores: BM=64 (wgmma M) × BE=64 experts for prefill; decode BM=16 (mma.sync) × BE=16 up
    to 64 tokens, × BE=32 up to ``ROUTE_DECODE_MAX_TOKENS``, so that a decode batch spreads
    over ~100-200 programs. Top-k: BT=16 tokens × E_PAD in 8 warps (32 registers per [16, 512]
    fp32 tile)."""
    e_pad = max(16, next_power_of_2(num_experts))
    if interpret:
        return dict(BM=16, BE=16, BK=32, num_warps=4, num_stages=1, BT=16, E_PAD=e_pad,
                    topk_warps=4)
    if num_tokens <= ROUTE_DECODE_MAX_TOKENS:
        return dict(BM=16, BE=16 if num_tokens <= 64 else 32, BK=128, num_warps=4,
                    num_stages=4, BT=16, E_PAD=e_pad, topk_warps=8)
    be = PREFILL_BE
    if cdiv(num_tokens, PREFILL_BM) * cdiv(num_experts, be) < PREFILL_MIN_PROGRAMS:
        be = PREFILL_NARROW_BE  # a mid-size prefill: more, narrower programs
    return dict(BM=PREFILL_BM, BE=be, BK=PREFILL_BK, num_warps=PREFILL_WARPS,
                num_stages=PREFILL_STAGES, BT=16, E_PAD=e_pad, topk_warps=8)


def route_sqrtsoftplus(x: torch.Tensor, gate_weight: torch.Tensor, bias: torch.Tensor,
                       bias_vl: torch.Tensor | None, image_mask: torch.Tensor | None, topk: int,
                       route_scale: float, gate_temp: float = 1.0, normalize: bool = True
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Registered op, the reference's contract: -> weights (N, topk) fp32, ids (N, topk) int64."""
    num_tokens, dim = x.shape
    num_experts = gate_weight.shape[0]
    assert gate_weight.shape[1] == dim and x.stride(1) == 1 and gate_weight.stride(1) == 1
    assert num_experts <= 1024 and topk <= num_experts
    cfg = route_config(num_tokens, num_experts, is_interpreting())
    assert dim % cfg["BK"] == 0, f"route_sqrtsoftplus: D={dim} must be a multiple of {cfg['BK']}"
    weights = torch.empty((num_tokens, topk), dtype=torch.float32, device=x.device)
    ids = torch.empty((num_tokens, topk), dtype=torch.int64, device=x.device)
    if num_tokens == 0:
        return weights, ids
    scores = torch.empty((num_tokens, num_experts), dtype=torch.float32, device=x.device)
    _route_scores_kernel[(cdiv(num_tokens, cfg["BM"]), cdiv(num_experts, cfg["BE"]))](
        x, gate_weight, scores, num_tokens, num_experts, dim, x.stride(0), gate_weight.stride(0),
        scores.stride(0), float(gate_temp), DOT_BF16=not is_interpreting(), BM=cfg["BM"],
        BE=cfg["BE"], BK=cfg["BK"], num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    has_image = image_mask is not None and bias_vl is not None
    bias = bias.to(torch.float32).contiguous()
    bias_vl_arg = bias_vl.to(torch.float32).contiguous() if has_image else bias
    mask_arg = image_mask.to(torch.int8).contiguous() if has_image else bias
    _route_topk_kernel[(cdiv(num_tokens, cfg["BT"]),)](
        scores, bias, bias_vl_arg, mask_arg, weights, ids, num_tokens, num_experts,
        scores.stride(0), float(route_scale), HAS_IMAGE=has_image,
        NORMALIZE=bool(normalize and topk > 1), TOPK=topk,
        KP=max(2, next_power_of_2(topk)), BT=cfg["BT"], E_PAD=cfg["E_PAD"],
        num_warps=cfg["topk_warps"])
    return weights, ids


def supports_route(spec: dict) -> bool:
    """CUDA SM90+; ``n_routed_experts`` (optional) <= 1024; ``hidden_size`` (optional) % 128."""
    return (quant_act.is_cuda_sm90_plus(spec) and spec.get("n_routed_experts", 0) <= 1024
            and spec.get("hidden_size", 128) % 128 == 0)
