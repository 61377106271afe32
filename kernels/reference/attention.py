"""Sparse attention over explicit key lists, with a per-head sink (model-spec §2.1, §2.7)."""

import torch


def sparse_attention_sink(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor,
                          sink: torch.Tensor, softmax_scale: float) -> torch.Tensor:
    """One softmax over the rows each query lists; K = V (one shared latent head).

    Args:
        q: (N, H, D) queries (bf16).
        kv: (M, D) key/value rows (bf16).
        indices: (N, K) int64 rows of ``kv`` per query; -1 entries are ignored.
        sink: (H,) fp32 per-head sink logit (enlarges the denominator only).
        softmax_scale: 1/sqrt(D).
    Returns:
        (N, H, D) in q's dtype; a query with no valid row gets 0.
    """
    valid = indices >= 0  # (N, K)
    rows = kv.double()[indices.clamp(min=0)]  # (N, K, D); fp64 sums: order-independent
    logits = torch.einsum("nhd,nkd->nhk", q.double(), rows) * softmax_scale
    logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
    m = logits.amax(dim=-1, keepdim=True)  # (N, H, 1)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(logits - m)
    denom = p.sum(-1, keepdim=True) + torch.exp(sink.double()[None, :, None] - m)
    out = torch.einsum("nhk,nkd->nhd", p, rows) / denom
    return out.to(q.dtype)
