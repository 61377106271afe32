"""The compressor of a KV-source layer (model-spec §2.5, §3.3): token groups -> latents."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from deepinfer.artifacts.model_spec import LayerSpec, ModelSpec
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.device import to_device
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.group_layout import build_group_layout
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
        # fp32 products of x's bf16 values with fp32-accurate sums (x.float()'s, without the
        # copy)
        return (k.linear(x, self.wkv.weight, out_dtype=torch.float32, promoted=True),
                k.linear(x, self.wgate.weight, out_dtype=torch.float32, promoted=True))

    def emit(self, k: KernelSet, kv: torch.Tensor, gate: torch.Tensor | None,
             batch: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """Latents of the groups every sequence's chunk completes, all sequences at once (batch
        order); updates each sequence's partial state (``model/group_layout.py``).

        Args:
            kv, gate: (N, Dh) rows of :meth:`project` for the batch's rows (gate None at
                ratio 1).
        Returns:
            latents (G, Dh) bf16 (pre-RoPE), their RoPE positions (G,) int64 (entry id *
            ratio; entry ids continue each cache's count) and G_b per sequence (sum G).
        """
        if self.ratio == 1:  # one entry per token, at the token's position
            return kv, batch.positions, list(batch.seq_lens)
        src, r = self.layer_id, self.ratio
        layout = build_group_layout(batch.seq_lens, batch.start_positions, r)
        parts = [batch.caches[b].partial(src) for b in layout.with_partial]
        source_kv = torch.cat([*(p[0] for p in parts), kv]) if parts else kv
        source_gate = torch.cat([*(p[1] for p in parts), gate]) if parts else gate
        for b, ranges in layout.open_rows:  # source holds its own copy of the partial rows
            batch.caches[b].set_partial(src, _rows(source_kv, ranges), _rows(source_gate, ranges))
        num_groups = sum(layout.counts)
        d = kv.shape[-1]
        if num_groups == 0:
            return kv.new_zeros(0, d, dtype=torch.bfloat16), batch.positions[:0], layout.counts
        rows = layout.group_rows
        host = layout.positions if rows is None else np.concatenate([layout.positions, rows])
        packed = to_device(host, kv.device)
        if rows is None:
            group_kv = source_kv[:layout.contiguous_rows]
            group_gate = source_gate[:layout.contiguous_rows]
        else:
            group_kv, group_gate = source_kv[packed[num_groups:]], source_gate[packed[num_groups:]]
        pooled = k.compress_pool(group_kv.view(num_groups, r, d),
                                 group_gate.view(num_groups, r, d))
        latents = k.rms_norm(pooled.to(torch.bfloat16), self.norm.weight, self.eps)
        return latents, packed[:num_groups], layout.counts


def _rows(source: torch.Tensor, ranges: list[tuple[int, int]]) -> torch.Tensor:
    """The source rows of ``ranges`` ((start, stop) pairs) in order; a view for one range."""
    if len(ranges) == 1:
        return source[ranges[0][0]:ranges[0][1]]
    return torch.cat([source[a:z] for a, z in ranges]) if ranges else source[:0]
