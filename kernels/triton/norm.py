"""RMSNorm (model-spec §2.1; reference ``norm.rms_norm``): fp32 statistics and weight, one cast.

One program per row, two passes over D in BLOCK_D chunks (sum of squares, then scale and store;
the second pass re-reads the row from L1/L2). IEEE sqrt and division for the statistic.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import quant_act
from deepinfer.kernels.triton.launch_math import next_power_of_2


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, D, stride_x, stride_y, eps, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_D)
    sumsq = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        x = tl.load(x_ptr + row * stride_x + d0 + offs, mask=d0 + offs < D, other=0.0)
        x = x.to(tl.float32)
        sumsq += x * x
    rstd = 1.0 / tl.sqrt_rn(tl.sum(sumsq, axis=0) / D + eps)
    for d0 in range(0, D, BLOCK_D):
        mask = d0 + offs < D
        x = tl.load(x_ptr + row * stride_x + d0 + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + d0 + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_y + d0 + offs, (w * (x * rstd)).to(y_ptr.dtype.element_ty),
                 mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Registered op: (..., D) any float dtype, weight (D,) bf16/fp32 -> (..., D) in x's dtype."""
    dim = x.shape[-1]
    x2 = x.reshape(-1, dim)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], dim), dtype=x.dtype, device=x.device)
    if x2.shape[0] > 0:
        block_d = min(2048, next_power_of_2(dim))
        _rms_norm_kernel[(x2.shape[0],)](x2, weight.contiguous(), y, dim, x2.stride(0),
                                         y.stride(0), float(eps), BLOCK_D=block_d,
                                         num_warps=8 if block_d >= 2048 else 4)
    return y.reshape(x.shape)


def supports_rms_norm(spec: dict) -> bool:
    """Any CUDA SM90+ device and any D."""
    return quant_act.is_cuda_sm90_plus(spec)
