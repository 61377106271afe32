"""Engram module (model-spec §2.9): hashed n-gram table rows -> gated update of every stream."""

from __future__ import annotations

import torch
from torch import nn

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model.params import Linear, f32_param


class TableEmbedding(nn.Module):
    """``weight`` (rows, head_dim): the FP8 table, held dequantized."""

    def __init__(self, rows: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, dim, dtype=torch.bfloat16),
                                   requires_grad=False)


class Engram(nn.Module):
    def __init__(self, spec: ModelSpec, slot: int):
        super().__init__()
        self.spec = spec
        n_ids = (spec.engram_max_ngram_size - 1) * spec.engram_n_heads
        self.embed = TableEmbedding(spec.engram_num_embeddings[slot], spec.engram_head_dim)
        self.wkv = Linear(n_ids * spec.engram_head_dim, spec.hidden_size * (spec.hc_mult + 1),
                          quant_act=True)
        self.q_weight = f32_param(spec.hc_mult, spec.hidden_size)
        self.k_weight = f32_param(spec.hc_mult, spec.hidden_size)

    def forward(self, k: KernelSet, x: torch.Tensor, hash_ids: torch.Tensor,
                text_mask: torch.Tensor | None) -> torch.Tensor:
        """Update the streams before the block's attention site.

        Args:
            x: (N, S, D) bf16 streams; hash_ids: (N, n_ids) int64 table rows of this layer;
            text_mask: (N,) bool, False inside image spans, or None.
        Returns:
            (N, S, D) bf16.
        """
        n, s, d = x.shape
        # (N, n_ids * head_dim) bf16: the FP8 table's rows dequantized (one launch on the GPU)
        rows = k.engram_rows(self.embed.weight, hash_ids).flatten(1)
        kv = self.wkv(k, rows)  # (N, D * (S + 1)) bf16: the injection reads it upcast (exact)
        key, value = kv[:, : s * d].view(n, s, d), kv[:, s * d:]
        wqk = self.q_weight.float() * self.k_weight.float()
        return k.engram_inject(x, key, value, wqk, self.spec.rms_norm_eps, text_mask)
