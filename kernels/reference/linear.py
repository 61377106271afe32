"""Dense projections (model-spec §4.3): bf16 GEMMs, FP8-activation GEMMs, grouped low-rank.

Weights arrive dequantized (e4m3 x 2^k and e2m1 x 2^k are exact in bf16), so an FP8 x FP8
GEMM is a GEMM of the dequantized operands. Like every reduction of the reference backend, it
accumulates in fp64 and rounds once: the result is then (to within a rounding tie) independent of
batch shape and summation order, so the reference is an oracle that chunked, batched and
incremental execution can be compared against exactly, and that fp32-accumulating kernels can be
compared against at their own rounding error.
"""

import torch

from deepinfer.kernels.reference.quant import fake_quant_fp8_block32


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight^T`` (fp64 accumulation); (N, I) x (O, I) -> (N, O) in x's dtype."""
    return (x.double() @ weight.double().t()).to(x.dtype)


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
    w = weight.double().view(groups, -1, x.shape[-1])  # (G, O, I)
    return torch.einsum("ngi,goi->ngo", x.double(), w).to(x.dtype)
