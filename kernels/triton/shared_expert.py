"""The shared expert on the dense projection kernels (model-spec §2.8):

    g = Q8_32(x) @ W1^T, u = Q8_32(x) @ W3^T      (x.dtype: the reference's linear_quant_act;
                                                  one GEMM of both at prefill rows when the
                                                  weights are packed: ``stacked_rows``)
    h = Q8_32(act(r * silu(min(g, limit)) * clamp(u, -limit, limit)))
    y = h @ W2^T                                  (x.dtype)

Why: ``moe_experts.expert_ffn`` runs the shared expert as a 1-expert grouped GEMM. At decode
(64-256 rows on one expert) its prefill tiling gives 36 programs for the whole GPU: 164 us per
layer at 64 x 4K, ~0.05 of HBM for 35 MB of FP8 weights (session 11, round 44's profile: 8 %
of the step); at prefill sizes the grouped tiles ran at 224 TFLOP/s against the dense bf16
path's 298 (4,096 rows). The dense kernels pick their tilings and split-K by row count
(``linear.linear_quant_act``'s rule: the FP8 kernel with Q8_32 codes below
``linear.bf16_min_rows`` rows, the bf16 path on the Q8_32 values from there — on the GPU
every row count, through ``linear_decode`` below 64 rows and ``linear_wide`` from there).

Same semantics as ``reference.moe.expert_ffn`` (the reference's casts and roundings, step for
step; only the fp32 summation order differs). Shapes: x (N, D); w1, w3 ``Fp8BlockWeight``
(I, D); w2 (D, I); route_weight (N,) fp32 or None -> (N, D) x.dtype.
"""

from __future__ import annotations

import torch

from deepinfer.kernels.quantized import Fp8BlockWeight, stacked_rows
from deepinfer.kernels.triton import gemm_fp8, linear, moe_swiglu, quant_act

# Rows up to which this path runs (None: every row count). Prefill sizes too: at 4,096 rows
# the dense bf16 path took 0.97 ms per layer against 1.30 for the grouped 1-expert FP8 tiles
# (298 vs 224 TFLOP/s), and the 4K prefill 154.7 -> 152.4 ms (session 12, round 48a).
# bench/kernel_overrides.py --shared-expert-max-rows sets a cap for A/B runs.
MAX_ROWS: int | None = None
# Rows from which the gate and up projections run as one GEMM when their weights lie in one
# tensor (``quantized.stacked_rows``: w3's codes and scales right after w1's, as
# ``Expert.pack_gate_up`` leaves them on load). At 4,096 rows each 2,304-output projection
# is 288 programs of one per SM (2.2 waves on 132 SMs, the last one 18 % full); both at once
# are 576 (4.4 waves). From gemm_fp8.INVARIANT_MIN_ROWS no launch splits K, so every output
# keeps its bits (each program runs the same K loop on the same tiles); below it the split-K
# by waves would change with the program count. None: off (an A/B through
# bench/kernel_overrides.py --launch-constant: a row count above the prompt's)
PACKED_MIN_ROWS: int | None = gemm_fp8.INVARIANT_MIN_ROWS


def applies(x: torch.Tensor, w1, w3, w2) -> bool:
    """Whether ``expert_ffn`` takes this path: FP8 block weights, 1..MAX_ROWS rows."""
    return (all(isinstance(w, Fp8BlockWeight) for w in (w1, w3, w2)) and x.dim() == 2
            and 0 < x.shape[0] and (MAX_ROWS is None or x.shape[0] <= MAX_ROWS))


def shared_expert_ffn(x: torch.Tensor, w1: Fp8BlockWeight, w3: Fp8BlockWeight,
                      w2: Fp8BlockWeight, limit: float,
                      route_weight: torch.Tensor | None = None,
                      x_rounded: bool = False) -> torch.Tensor:
    """(N, D) -> (N, D) x.dtype; see the module docstring. ``x_rounded``: x holds its Q8_32
    values already (the bf16 path reads it as it is; the FP8 path's codes give those values)."""
    rows = x.shape[0]
    # no routing weight: the SwiGLU's weight-free form (1 * h is h: no ones tensor and its fill)
    rw = None if route_weight is None else route_weight.to(torch.float32)
    x = x.contiguous()
    if rows < linear.bf16_min_rows(x):  # FP8 MMA on the codes
        codes, scales = quant_act.quant_q8_32(x)
        g = gemm_fp8.gemm_q8(codes, scales, w1, x.dtype)
        u = gemm_fp8.gemm_q8(codes, scales, w3, x.dtype)
        h_codes, h_scales = moe_swiglu.swiglu_q8(g, u, rw, limit, x.dtype)
        return gemm_fp8.gemm_q8(h_codes, h_scales, w2, x.dtype)
    xq = x if x_rounded else quant_act.fake_quant_fp8_block32(x)  # bf16 MMA on the Q8_32 values
    pair = (stacked_rows(w1, w3) if PACKED_MIN_ROWS is not None and rows >= PACKED_MIN_ROWS
            else None)
    if pair is not None:  # one GEMM of 2I outputs: g and u as its two column halves
        gu = linear.linear(xq, pair)
        g, u = gu[:, :w1.codes.shape[0]], gu[:, w1.codes.shape[0]:]
    else:
        g = linear.linear(xq, w1)
        u = linear.linear(xq, w3)
    return linear.linear(moe_swiglu.swiglu_fake_q8(g, u, rw, limit, x.dtype), w2)
