"""RMSNorm (model-spec §2.1): fp32 statistics, weight multiplied in fp32, one cast at the end."""

import torch

from deepinfer.kernels.reference.quant import fake_quant_fp8_block32


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * weight`` over the last dim.

    Args:
        x: (..., D) any float dtype.
        weight: (D,) bf16 or fp32; promoted to fp32 before the multiply.
        eps: 1e-20 for V4.1.
    Returns:
        (..., D) in x's dtype.
    """
    xf = x.float()
    ms = xf.double().pow(2).mean(-1, keepdim=True).float()  # fp64 sum: order-independent
    y = xf * torch.rsqrt(ms + eps)
    return (weight.float() * y).to(x.dtype)


def rms_norm_q8(x: torch.Tensor, weight: torch.Tensor, eps: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rms_norm` and its Q8_32 values (``fake_quant_fp8_block32`` of the normed x: what
    the quantized projections of it read), both in x's dtype; D % 32 == 0."""
    h = rms_norm(x, weight, eps)
    return h, fake_quant_fp8_block32(h)
