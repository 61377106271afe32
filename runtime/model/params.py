"""Parameter holders whose attribute names follow the checkpoint's tensor names (model-spec §4).

Weights are stored dequantized (FP8/FP4 codes x power-of-two scales are exact in bf16); a
:class:`Linear` remembers whether the checkpoint stored it quantized, because GEMMs against
quantized weights first quantize their input (Q8_32, model-spec §4.3).
"""

import torch
from torch import nn

from deepinfer.kernels.registry import KernelSet


def _param(shape: tuple[int, ...], dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)


class Linear(nn.Module):
    """``weight`` (out, in); ``quant_act``: the checkpoint stores it FP8/FP4."""

    def __init__(self, in_features: int, out_features: int, quant_act: bool,
                 dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.weight = _param((out_features, in_features), dtype)
        self.quant_act = quant_act

    def forward(self, k: KernelSet, x: torch.Tensor) -> torch.Tensor:
        """(N, in) -> (N, out) in x's dtype; the input is Q8_32-quantized first if quant_act."""
        if self.quant_act:
            return k.linear_quant_act(x, self.weight)
        return k.linear(x, self.weight)


class Norm(nn.Module):
    """An RMSNorm ``weight`` (dim,)."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = _param((dim,), torch.bfloat16)


def f32_param(*shape: int) -> nn.Parameter:
    return _param(tuple(shape), torch.float32)
