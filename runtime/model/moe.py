"""MoE of one layer (model-spec §2.8): sqrtsoftplus router, routed SwiGLU experts, shared expert."""

from __future__ import annotations

import torch
from torch import nn

from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model.params import Linear, f32_param


class Expert(nn.Module):
    def __init__(self, dim: int, inter: int):
        super().__init__()
        self.w1 = Linear(dim, inter, quant_act=True)
        self.w2 = Linear(inter, dim, quant_act=True)
        self.w3 = Linear(dim, inter, quant_act=True)


class Gate(nn.Module):
    def __init__(self, dim: int, n_experts: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_experts, dim, dtype=torch.bfloat16),
                                   requires_grad=False)
        self.bias = f32_param(n_experts)
        self.bias_vl = f32_param(n_experts)


class MoE(nn.Module):
    def __init__(self, dim: int, inter: int, n_experts: int, top_k: int, route_scale: float,
                 gate_temp: float, normalize: bool, swiglu_limit: float):
        super().__init__()
        self.gate = Gate(dim, n_experts)
        self.experts = nn.ModuleList(Expert(dim, inter) for _ in range(n_experts))
        self.shared_experts = Expert(dim, inter)
        self.top_k, self.route_scale, self.gate_temp = top_k, route_scale, gate_temp
        self.normalize, self.limit = normalize, swiglu_limit

    def forward(self, k: KernelSet, x: torch.Tensor,
                image_mask: torch.Tensor | None) -> torch.Tensor:
        """(N, D) bf16 -> (N, D) bf16: routed experts + shared expert, accumulated in fp32."""
        weights, ids = k.route_sqrtsoftplus(x, self.gate.weight, self.gate.bias,
                                           self.gate.bias_vl, image_mask, self.top_k,
                                           self.route_scale, self.gate_temp, self.normalize)
        w1 = torch.stack([e.w1.weight for e in self.experts])
        w3 = torch.stack([e.w3.weight for e in self.experts])
        w2 = torch.stack([e.w2.weight for e in self.experts])
        y = k.moe_routed_experts(x, ids, weights, w1, w3, w2, self.limit)
        s = self.shared_experts
        y = y + k.expert_ffn(x, s.w1.weight, s.w3.weight, s.w2.weight, self.limit).float()
        return y.to(x.dtype)
