"""Dense projections (model-spec §4.3): bf16 GEMMs, FP8-activation GEMMs, grouped low-rank.

Weights arrive dequantized (e4m3 x 2^k and e2m1 x 2^k are exact in bf16), so an FP8 x FP8
GEMM with fp32 accumulation is an fp32 GEMM of the dequantized operands.
"""

import torch

from deepinfer.kernels.reference.quant import fake_quant_fp8_block32


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight^T`` with fp32 accumulation; (N, I) x (O, I) -> (N, O) in x's dtype."""
    return (x.float() @ weight.float().t()).to(x.dtype)


def linear_quant_act(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """GEMM against an FP8/FP4 weight: the input is first fake-quantized per 32 (Q8_32)."""
    return linear(fake_quant_fp8_block32(x), weight)


def grouped_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Block-diagonal grouped projection (the attention ``wo_a``).

    Args:
        x: (N, G, I) per-group inputs (bf16).
        weight: (G * O, I): group g uses rows g*O .. (g+1)*O - 1.
    Returns:
        (N, G, O) in x's dtype.
    """
    groups = x.shape[1]
    w = weight.float().view(groups, -1, x.shape[-1])  # (G, O, I)
    return torch.einsum("ngi,goi->ngo", x.float(), w).to(x.dtype)
