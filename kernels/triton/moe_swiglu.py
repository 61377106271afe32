"""The routed experts' SwiGLU step between the gated and the down GEMMs, and its Q8_32 rounding.

    h = act(r * silu(min(act(g), limit)) * clamp(act(u), -limit, limit))     (model-spec §2.8)
    h's codes + ue8m0 scales per 32 columns = the down projection's Q8_32 input

``swiglu_h`` is the math on register tiles: ``moe_experts``' gated epilogue runs it on its
accumulators. ``swiglu_q8`` runs it as its own launch over g and u written by a GEMM that has no
such epilogue (the W4A8 Gluon decode kernel, ``moe_gluon_w4a8``;
``shared_expert``): one program per (BP pairs, BN columns); ``swiglu_fake_q8`` stores h's
Q8_32 values instead, for a bf16-path projection; ``swiglu_fake_q8_slots`` stores them as the
bf16 prefill expert GEMM reads its tokens (slot-major, K permuted inside each 32-K group:
``moe_gluon_w4a16_prefill.gather_tokens`` of ``swiglu_fake_q8``'s h, without that gather's
launch and its read and write of h). Reference: ``reference.moe.swiglu_limit`` then
``reference.quant.quant_fp8_ue8m0``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton.launch_math import cdiv
from deepinfer.kernels.triton.quant_act import q8_32_groups, q8_32_values

ACT_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
# the slot-major SwiGLU's program (``swiglu_fake_q8_slots``): slots x columns, warps
SLOTS_BLOCK_P, SLOTS_BLOCK_N, SLOTS_WARPS = 16, 128, 4


@triton.jit
def round_act(v, ACT: tl.constexpr):
    """fp32 -> the activation dtype and back (0 fp32, 1 bf16, 2 fp16): the reference's casts."""
    if ACT == 1:
        v = v.to(tl.bfloat16).to(tl.float32)
    elif ACT == 2:
        v = v.to(tl.float16).to(tl.float32)
    return v


@triton.jit
def swiglu_h(g, u, route_w, limit, ACT: tl.constexpr):
    """h (fp32, rounded to the activation dtype) from the gate and up projections g, u (fp32
    tiles, not yet rounded) and the routing weight (broadcast to their shape)."""
    g = tl.minimum(round_act(g, ACT), limit)
    u = tl.minimum(tl.maximum(round_act(u, ACT), -limit), limit)
    h = g / (1.0 + tl.exp(-g)) * u  # silu(g) * u, fp32
    return round_act(route_w * h, ACT)


@triton.jit
def a_operand_order(v, ROWS: tl.constexpr, COLS: tl.constexpr):
    """Rows of COLS values (any shape of ROWS * COLS elements, COLS a multiple of 32) -> [ROWS,
    COLS] with each 32-column group in the bf16 wgmma A operand's order, out[32 G + v] =
    x[32 G + K_off(v)] (``mxfp4_w4a8_bf16.k_permutation``): K_off's bits (k4 k3 k2 k1 k0) are
    v's (v4 v0 v2 v1 v3), a register reshape. Shared by the token gather
    (``moe_gluon_w4a16_prefill.gather_tokens``) and ``swiglu_fake_q8_slots``."""
    # [S, G, k4, k3, k2, k1, k0] -> [S, G, v4 = k4, v3 = k0, v2 = k3, v1 = k2, v0 = k1]
    v = tl.reshape(v, (ROWS, COLS // 32, 2, 2, 2, 2, 2))
    return tl.reshape(tl.permute(v, (0, 1, 2, 6, 3, 4, 5)), (ROWS, COLS))


@triton.jit
def _swiglu_q8_kernel(g_ptr, u_ptr, rw_ptr, codes_ptr, scale_ptr, num_pairs, I, limit,
                      stride_g, stride_u, stride_c, stride_s,
                      ACT: tl.constexpr, BP: tl.constexpr, BN: tl.constexpr,
                      FAKE: tl.constexpr = False, HAS_RW: tl.constexpr = True):
    # HAS_RW False: no routing weights (the shared expert): a weight of 1 (1 * h is h exactly)
    rows = tl.program_id(0) * BP + tl.arange(0, BP)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ok_r = rows < num_pairs
    mask = ok_r[:, None] & (cols[None, :] < I)
    r64 = rows.to(tl.int64)
    g = tl.load(g_ptr + r64[:, None] * stride_g + cols[None, :], mask=mask, other=0.0)
    u = tl.load(u_ptr + r64[:, None] * stride_u + cols[None, :], mask=mask, other=0.0)
    if HAS_RW:
        rw = tl.load(rw_ptr + rows, mask=ok_r, other=0.0)
    else:
        rw = tl.full((BP,), 1.0, tl.float32)
    h = swiglu_h(g.to(tl.float32), u.to(tl.float32), rw[:, None], limit, ACT)
    codes, e = q8_32_groups(tl.reshape(h, (BP, BN // 32, 32)), 2)
    if FAKE:  # the Q8_32 values in codes_ptr's dtype (exact in bf16 / fp16 / fp32)
        v = q8_32_values(codes, e)
        tl.store(codes_ptr + r64[:, None] * stride_c + cols[None, :],
                 tl.reshape(v, (BP, BN)).to(codes_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(codes_ptr + r64[:, None] * stride_c + cols[None, :],
                 tl.reshape(codes, (BP, BN)).to(tl.uint8, bitcast=True), mask=mask)
        groups = tl.program_id(1) * (BN // 32) + tl.arange(0, BN // 32)
        tl.store(scale_ptr + r64[:, None] * stride_s + groups[None, :],
                 tl.reshape(e, (BP, BN // 32)).to(tl.uint8),
                 mask=ok_r[:, None] & (groups[None, :] < I // 32))


@triton.jit
def _swiglu_slots_kernel(g_ptr, u_ptr, rw_ptr, pairs_ptr, out_ptr, num_pairs, num_slots, I,
                         limit, stride_g, stride_u, stride_o, ACT: tl.constexpr,
                         BP: tl.constexpr, BN: tl.constexpr):
    """Program (slots, column block): for the BP slots' pairs (sorted_pairs; padding slots, the
    sentinel num_pairs, are skipped and their rows left as they are) h's Q8_32 values of BN
    columns, stored in the slots' rows with each 32-column group in the wgmma A operand's
    order, out[32 G + v] = h[32 G + K_off(v)] (``gather_tokens``' register permutation)."""
    slots = tl.program_id(0) * BP + tl.arange(0, BP)
    pairs = tl.load(pairs_ptr + slots, mask=slots < num_slots, other=num_pairs)
    live = pairs < num_pairs
    if tl.max(live.to(tl.int32), axis=0) > 0:
        cols = tl.program_id(1) * BN + tl.arange(0, BN)
        mask = live[:, None] & (cols[None, :] < I)
        p64 = tl.where(live, pairs, 0).to(tl.int64)
        g = tl.load(g_ptr + p64[:, None] * stride_g + cols[None, :], mask=mask, other=0.0)
        u = tl.load(u_ptr + p64[:, None] * stride_u + cols[None, :], mask=mask, other=0.0)
        rw = tl.load(rw_ptr + p64, mask=live, other=0.0)
        h = swiglu_h(g.to(tl.float32), u.to(tl.float32), rw[:, None], limit, ACT)
        codes, e = q8_32_groups(tl.reshape(h, (BP, BN // 32, 32)), 2)
        v = a_operand_order(q8_32_values(codes, e), BP, BN)
        tl.store(out_ptr + slots.to(tl.int64)[:, None] * stride_o + cols[None, :],
                 v.to(out_ptr.dtype.element_ty), mask=mask)


def swiglu_q8(g: torch.Tensor, u: torch.Tensor, route_w: torch.Tensor | None, limit: float,
              act_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """g, u (P, I) fp32/bf16 (one row per (token, expert) pair), route_w (P,) fp32 or None (a
    weight of 1 for every row: the shared expert, without a ones tensor) -> h's Q8_32 codes
    (P, I) uint8 and ue8m0 scales (P, I/32) uint8; act_dtype: the activation dtype h is
    rounded to first (the reference's casts)."""
    _check(g, u, route_w)
    num_pairs, inter = g.shape
    codes = torch.empty((num_pairs, inter), dtype=torch.uint8, device=g.device)
    scales = torch.empty((num_pairs, inter // 32), dtype=torch.uint8, device=g.device)
    _launch(g, u, route_w, limit, act_dtype, codes, scales, fake=False)
    return codes, scales


def swiglu_fake_q8(g: torch.Tensor, u: torch.Tensor, route_w: torch.Tensor | None,
                   limit: float, act_dtype: torch.dtype) -> torch.Tensor:
    """``swiglu_q8``'s h as its Q8_32 values (P, I) act_dtype (= ``fake_quant_fp8_block32`` of
    h; exact in act_dtype): the input of a bf16-path projection (route_w None: weights of 1)."""
    _check(g, u, route_w)
    h = torch.empty(g.shape, dtype=act_dtype, device=g.device)
    _launch(g, u, route_w, limit, act_dtype, h, h, fake=True)
    return h


def swiglu_fake_q8_slots(g: torch.Tensor, u: torch.Tensor, route_w: torch.Tensor,
                         limit: float, act_dtype: torch.dtype, sorted_pairs: torch.Tensor,
                         num_pairs: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """``swiglu_fake_q8``'s h, gathered as the bf16 prefill expert GEMM reads its tokens:
    (len(sorted_pairs), I) bf16, slot i = h[sorted_pairs[i]] with each 32-column group
    permuted by ``mxfp4_w4a8_bf16.k_permutation`` — bit for bit
    ``gather_tokens(swiglu_fake_q8(g, u, route_w, limit, act_dtype).to(bf16), sorted_pairs,
    num_pairs, 1)`` (Q8_32 values are exact in bf16) in one launch. g, u (P, I) with P =
    num_pairs rows in pair order; padding slots (sorted_pairs[i] >= num_pairs) are left
    unwritten (in ``out`` when given: contiguous, that shape, bf16)."""
    _check(g, u, route_w)
    assert g.shape[0] == num_pairs, (g.shape, num_pairs)
    slots, inter = sorted_pairs.numel(), g.shape[1]
    if out is None:
        out = torch.empty((slots, inter), dtype=torch.bfloat16, device=g.device)
    assert out.shape == (slots, inter) and out.dtype == torch.bfloat16 and out.is_contiguous()
    if slots and num_pairs:
        bp, bn = SLOTS_BLOCK_P, SLOTS_BLOCK_N
        rw = route_w.reshape(-1).to(torch.float32).contiguous()
        _swiglu_slots_kernel[(cdiv(slots, bp), cdiv(inter, bn))](
            g, u, rw, sorted_pairs, out, num_pairs, slots, inter, float(limit), g.stride(0),
            u.stride(0), out.stride(0), ACT=ACT_CODES[act_dtype], BP=bp, BN=bn,
            num_warps=SLOTS_WARPS)
    return out


def aot_cases() -> list[dict]:
    """SM90 compile-gate case (tests/kernels/triton/test_moe_swiglu.py): the slot-major
    SwiGLU at the engine's tile, bf16 g / u."""
    return [{"id": "swiglu_slots_bf16", "module": __name__, "kernel": "_swiglu_slots_kernel",
             "signature": {"g_ptr": "*bf16", "u_ptr": "*bf16", "rw_ptr": "*fp32",
                           "pairs_ptr": "*i32", "out_ptr": "*bf16", "num_pairs": "i32",
                           "num_slots": "i32", "I": "i32", "limit": "fp32", "stride_g": "i32",
                           "stride_u": "i32", "stride_o": "i32"},
             "constexprs": {"ACT": 1, "BP": 16, "BN": 128},
             "num_warps": 4, "num_stages": 1, "no_spill": True, "max_stack": 0,
             "divisible": ["I", "stride_g", "stride_u", "stride_o"]}]


def _check(g: torch.Tensor, u: torch.Tensor, route_w: torch.Tensor | None) -> None:
    assert g.shape == u.shape and g.dim() == 2 and g.shape[1] % 32 == 0, (g.shape, u.shape)
    assert g.stride(1) == 1 and u.stride(1) == 1
    assert route_w is None or route_w.numel() == g.shape[0], (route_w.shape, g.shape)


def _launch(g, u, route_w, limit, act_dtype, out, scales, fake: bool) -> None:
    num_pairs, inter = g.shape
    if num_pairs:
        bp, bn = 16, 128
        rw = g if route_w is None else route_w.reshape(-1).to(torch.float32).contiguous()
        _swiglu_q8_kernel[(cdiv(num_pairs, bp), cdiv(inter, bn))](
            g, u, rw, out, scales, num_pairs, inter, float(limit), g.stride(0), u.stride(0),
            out.stride(0), scales.stride(0), ACT=ACT_CODES[act_dtype], BP=bp, BN=bn,
            FAKE=fake, HAS_RW=route_w is not None, num_warps=4)
