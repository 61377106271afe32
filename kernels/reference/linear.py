"""Dense projections (model-spec §4.3): bf16 GEMMs, FP8-activation GEMMs, grouped low-rank.

A weight is a plain tensor or a quantized container of ``kernels/quantized.py``
(``Fp8BlockWeight``; a 1-expert ``Mxfp4ExpertWeights``), dequantized here on the fly to bf16
(e4m3 x 2^k and e2m1 x 2^k are exact in bf16), so an FP8 x FP8 GEMM is a GEMM of the
dequantized operands and both forms give the same bits. Like every reduction of the reference
backend, it accumulates in fp64 and rounds once: the result is then (to within a rounding tie)
independent of batch shape and summation order, so the reference is an oracle that chunked,
batched and incremental execution can be compared against exactly, and that fp32-accumulating
kernels can be compared against at their own rounding error.
"""

import torch

from deepinfer.kernels.quantized import Fp8BlockWeight, Mxfp4ExpertWeights, dense
from deepinfer.kernels.reference.quant import fake_quant_fp8_block32

Weight = torch.Tensor | Fp8BlockWeight | Mxfp4ExpertWeights
"""A matrix (O, I): plain, FP8 32x32-tile, or a 1-expert MXFP4 container."""


def linear(x: torch.Tensor, weight: Weight, out_dtype: torch.dtype | None = None,
           promoted: bool = False) -> torch.Tensor:
    """``x @ weight^T`` (fp64 accumulation); (N, I) x (O, I) -> (N, O) in ``out_dtype`` (default
    x's dtype; the logit head: bf16 x, fp32 logits). ``promoted`` asks a kernel for
    fp32-accurate sums (the compressor's fp32 projections of bf16 x); fp64 sums already are."""
    return (x.double() @ dense(weight).double().t()).to(out_dtype or x.dtype)


def linear_quant_act(x: torch.Tensor, weight: Weight) -> torch.Tensor:
    """GEMM against an FP8/FP4 weight: the input is first fake-quantized per 32 (Q8_32)."""
    return linear(fake_quant_fp8_block32(x), weight)


def grouped_linear(x: torch.Tensor, weight: torch.Tensor | Fp8BlockWeight) -> torch.Tensor:
    """Block-diagonal grouped projection (the attention ``wo_a``).

    Args:
        x: (N, G, I) per-group inputs (bf16).
        weight: (G * O, I), plain or ``Fp8BlockWeight``: group g uses rows g*O .. (g+1)*O - 1.
    Returns:
        (N, G, O) in x's dtype.
    """
    groups = x.shape[1]
    w = dense(weight).double().view(groups, -1, x.shape[-1])  # (G, O, I)
    return torch.einsum("ngi,goi->ngo", x.double(), w).to(x.dtype)
