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

    def attn_input(self, k: KernelSet, x: torch.Tensor, pre: torch.Tensor | None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention site's input (N, D) bf16 — the collapse of x (N, S, D) with the
        previous site's pre (N, S), RMS-normed — and its Q8_32 values, where no fused expand
        produced them (the first block, after an engram injection). ``pre`` None: the first
        site's identity pre-mix (1, 0, ..., 0), whose collapse is stream 0 itself (exactly:
        1 * x_0 + 0 * x_i), read in place."""
        y = x[:, 0] if pre is None else k.hc_collapse(x, pre)
        return k.rms_norm_q8(y, self.attn_norm.weight, self.spec.rms_norm_eps)

    def forward(self, k: KernelSet, x: torch.Tensor, h: tuple[torch.Tensor, torch.Tensor],
                batch: ForwardBatch | DecodeRows, published: Published,
                next_norm: torch.Tensor | None = None, next_quant: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor,
                           tuple[torch.Tensor, torch.Tensor | None] | None]:
        """Streams x (N, S, D) bf16 and the attention input h = (values, Q8_32 values), each
        (N, D) (:meth:`attn_input`) -> new streams, this block's FFN-site pre (N, S) fp32 (the
        next site's collapse weights) and, with ``next_norm`` (D,), the next site's input
        ``rms_norm(hc_collapse(x', pre), next_norm)`` and its Q8_32 values (None unless
        ``next_quant``: the head's input) from the last expand's own pass
        (``hc_expand_norm``), else None.

        Single-pass mHC: a site's collapse weights come from the previous site's coefficients,
        so each expand also yields the following site's normalized input. Its Q8_32 values are
        rounded once there and read by every quantized projection of the site (``wq_a``,
        ``wkv``; the shared and routed experts)."""
        eps = self.spec.rms_norm_eps
        a_pre, a_post, a_comb = self._coeffs(k, x, self.hc_attn_fn, self.hc_attn_scale,
                                             self.hc_attn_base)
        out = self.attn(k, h[0], batch, published, h[1])
        x, hf, hfq = k.hc_expand_norm(out, x, a_post, a_comb, a_pre, self.ffn_norm.weight, eps,
                                      quant=True)
        f_pre, f_post, f_comb = self._coeffs(k, x, self.hc_ffn_fn, self.hc_ffn_scale,
                                             self.hc_ffn_base)
        out = self.ffn(k, hf, batch.image_mask, xq=hfq)
        if next_norm is None:
            return k.hc_expand(out, x, f_post, f_comb), f_pre, None
        x, hn, hnq = k.hc_expand_norm(out, x, f_post, f_comb, f_pre, next_norm, eps,
                                      quant=next_quant)
        return x, f_pre, (hn, hnq)
