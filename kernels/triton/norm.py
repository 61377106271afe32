"""RMSNorm (model-spec §2.1; reference ``norm.rms_norm``): fp32 statistics and weight, one cast.

One program per row, two passes over D in BLOCK_D chunks (sum of squares, then scale and store;
the second pass re-reads the row from L1/L2). IEEE sqrt and division for the statistic.
``rms_norm_q8`` also stores the Q8_32 values of the normed row from the second pass (the input
of a layer's quantized projections, rounded once: ``runtime/model/attention.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import quant_act
from deepinfer.kernels.triton.launch_math import next_power_of_2


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, q_ptr, D, stride_x, stride_y, stride_q, eps,
                     BLOCK_D: tl.constexpr, QUANT: tl.constexpr):
    """One row: the sum of squares over [BLOCK_D] chunks, then y = w * (x * rstd) stored from
    [BLOCK_D / 32, 32] tiles (QUANT: with the Q8_32 values of those rounded y into q)."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_D)
    sumsq = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        x = tl.load(x_ptr + row * stride_x + d0 + offs, mask=d0 + offs < D, other=0.0)
        x = x.to(tl.float32)
        sumsq += x * x
    rstd = 1.0 / tl.sqrt_rn(tl.sum(sumsq, axis=0) / D + eps)
    tile = tl.arange(0, BLOCK_D // 32)[:, None] * 32 + tl.arange(0, 32)[None, :]  # [G, 32]
    for d0 in range(0, D, BLOCK_D):
        mask = d0 + tile < D
        x = tl.load(x_ptr + row * stride_x + d0 + tile, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + d0 + tile, mask=mask, other=0.0).to(tl.float32)
        y = (w * (x * rstd)).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + row * stride_y + d0 + tile, y, mask=mask)
        if QUANT:
            codes, e = quant_act.q8_32_groups(y.to(tl.float32), 1)
            tl.store(q_ptr + row * stride_q + d0 + tile,
                     quant_act.q8_32_values(codes, e).to(q_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, weight: torch.Tensor, eps: float, quant: bool
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    dim = x.shape[-1]
    x2 = x.reshape(-1, dim)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], dim), dtype=x.dtype, device=x.device)
    q = torch.empty_like(y) if quant else None
    if x2.shape[0] > 0:
        block_d = max(32, min(2048, next_power_of_2(dim)))
        _rms_norm_kernel[(x2.shape[0],)](x2, weight.contiguous(), y, y if q is None else q, dim,
                                         x2.stride(0), y.stride(0), y.stride(0), float(eps),
                                         BLOCK_D=block_d, QUANT=quant,
                                         num_warps=8 if block_d >= 2048 else 4)
    return y.reshape(x.shape), None if q is None else q.reshape(x.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Registered op: (..., D) any float dtype, weight (D,) bf16/fp32 -> (..., D) in x's dtype."""
    return _launch(x, weight, eps, False)[0]


def rms_norm_q8(x: torch.Tensor, weight: torch.Tensor, eps: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Registered op (reference ``norm.rms_norm_q8``): ``rms_norm`` and its Q8_32 values
    (``quant_act.q8_32_groups`` of the stored rows: the quantizer kernel's bits) in one pass;
    D % 32 == 0."""
    assert x.shape[-1] % 32 == 0, f"rms_norm_q8: D = {x.shape[-1]} must be a multiple of 32"
    y, q = _launch(x, weight, eps, True)
    assert q is not None
    return y, q


def supports_rms_norm(spec: dict) -> bool:
    """Any CUDA SM90+ device and any D."""
    return quant_act.is_cuda_sm90_plus(spec)
