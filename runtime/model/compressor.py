"""The compressor of a KV-source layer (model-spec §2.5, §3.3): token groups -> latents."""

from __future__ import annotations

import torch
from torch import nn

from deepinfer.artifacts.model_spec import LayerSpec, ModelSpec
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model.cache import CacheView
from deepinfer.runtime.model.params import Linear, Norm


class Compressor(nn.Module):
    """ratio 1: ``lat_t = norm(x_t @ Wkv^T)``; ratio r > 1: per-channel softmax pooling of the
    fp32 projections of r consecutive tokens, gated by ``Wgate``; a trailing incomplete group
    waits in the cache's partial-group state until a later chunk completes it."""

    def __init__(self, spec: ModelSpec, layer: LayerSpec):
        super().__init__()
        self.ratio = layer.compress_ratio
        self.layer_id = layer.layer_id
        self.eps = spec.rms_norm_eps
        self.wkv = Linear(spec.hidden_size, spec.head_dim, quant_act=False)
        if self.ratio > 1:
            self.wgate = Linear(spec.hidden_size, spec.head_dim, quant_act=False)
        self.norm = Norm(spec.head_dim)

    def project(self, k: KernelSet, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token projections of all N tokens.

        Returns ratio 1: (N, Dh) bf16 normalized latents and None; ratio > 1: (N, Dh) fp32
        ``kv`` and ``gate`` projections (weights promoted to fp32).
        """
        if self.ratio == 1:
            return k.rms_norm(self.wkv(k, x), self.norm.weight, self.eps), None
        xf = x.float()
        return self.wkv(k, xf), self.wgate(k, xf)

    def emit(self, k: KernelSet, kv: torch.Tensor, gate: torch.Tensor | None,
             cache: CacheView) -> tuple[torch.Tensor, torch.Tensor]:
        """Latents of the groups one sequence's chunk completes; updates the partial state.

        Args:
            kv, gate: this sequence's rows of :meth:`project`.
        Returns:
            latents (G, Dh) bf16 (pre-RoPE) and their group indices (G,) int64, starting at the
            number of entries already in the cache. RoPE position of group j is ``j * ratio``.
        """
        first = cache.num_entries(self.layer_id)
        if self.ratio == 1:
            return kv, first + torch.arange(kv.shape[0], device=kv.device)
        src = self.layer_id
        partial_kv, partial_gate = cache.partial(src)
        kv_all = torch.cat([partial_kv, kv])
        gate_all = torch.cat([partial_gate, gate])
        groups = kv_all.shape[0] // self.ratio
        done = groups * self.ratio
        cache.set_partial(src, kv_all[done:], gate_all[done:])
        d = kv_all.shape[-1]
        pooled = k.compress_pool(kv_all[:done].view(groups, self.ratio, d),
                                 gate_all[:done].view(groups, self.ratio, d))
        latents = k.rms_norm(pooled.to(torch.bfloat16), self.norm.weight, self.eps)
        return latents, first + torch.arange(groups, device=kv.device)
