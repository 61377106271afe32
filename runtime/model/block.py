"""One decoder block with single-pass mHC (model-spec §2.3)."""

from __future__ import annotations

import torch
from torch import nn

from deepinfer.artifacts.model_spec import LayerSpec, ModelSpec
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model.attention import Attention, Published
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.decode_rows import DecodeRows
from deepinfer.runtime.model.engram import Engram
from deepinfer.runtime.model.moe import MoE
from deepinfer.runtime.model.params import Norm, f32_param


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, layer: LayerSpec):
        super().__init__()
        self.spec = spec
        d, s = spec.hidden_size, spec.hc_mult
        n_mix = (2 + s) * s
        self.attn_norm, self.ffn_norm = Norm(d), Norm(d)
        self.hc_attn_fn, self.hc_ffn_fn = f32_param(n_mix, s * d), f32_param(n_mix, s * d)
        self.hc_attn_base, self.hc_ffn_base = f32_param(n_mix), f32_param(n_mix)
        self.hc_attn_scale, self.hc_ffn_scale = f32_param(3), f32_param(3)
        self.attn = Attention(spec, layer)
        self.ffn = MoE(d, spec.moe_intermediate_size, spec.n_routed_experts,
                       spec.num_experts_per_tok, spec.routed_scaling_factor, spec.gate_temp,
                       spec.norm_topk_prob, spec.swiglu_limit)
        if layer.is_engram:
            self.engram = Engram(spec, spec.engram_slot(layer.layer_id))

    def _coeffs(self, k: KernelSet, x: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor,
                base: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        spec = self.spec
        return k.hc_coeffs(x, fn, scale, base, spec.rms_norm_eps, spec.hc_eps,
                           spec.hc_sinkhorn_iters)

    def forward(self, k: KernelSet, x: torch.Tensor, pre_in: torch.Tensor,
                batch: ForwardBatch | DecodeRows, published: Published
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Streams (N, S, D) bf16 and the previous site's pre (N, S) fp32 -> new streams and
        this block's FFN-site pre (consumed by the next block's attention site)."""
        eps = self.spec.rms_norm_eps
        a_pre, a_post, a_comb = self._coeffs(k, x, self.hc_attn_fn, self.hc_attn_scale,
                                             self.hc_attn_base)
        h = k.rms_norm(k.hc_collapse(x, pre_in), self.attn_norm.weight, eps)
        x = k.hc_expand(self.attn(k, h, batch, published), x, a_post, a_comb)
        f_pre, f_post, f_comb = self._coeffs(k, x, self.hc_ffn_fn, self.hc_ffn_scale,
                                             self.hc_ffn_base)
        h = k.rms_norm(k.hc_collapse(x, a_pre), self.ffn_norm.weight, eps)
        x = k.hc_expand(self.ffn(k, h, batch.image_mask), x, f_post, f_comb)
        return x, f_pre
