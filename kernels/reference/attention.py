"""Sparse attention over explicit key lists, with a per-head sink (model-spec §2.1, §2.7)."""

import torch


def sparse_attention_sink(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor,
                          sink: torch.Tensor, softmax_scale: float,
                          out: torch.Tensor | None = None,
                          row_counts: torch.Tensor | None = None) -> torch.Tensor:
    """One softmax over the rows each query lists; K = V (one shared latent head).

    Args:
        q: (N, H, D) queries (bf16).
        kv: (M, D) key/value rows (bf16).
        indices: (N, K) int64 rows of ``kv`` per query; -1 entries are ignored.
        sink: (H,) fp32 per-head sink logit (enlarges the denominator only).
        softmax_scale: 1/sqrt(D).
        out: optional (N, H, D) buffer in q's dtype (e.g. a row slice of a larger output) the
            result is written to and returned.
        row_counts: optional (N,) int: query n lists only its first row_counts[n] entries
            (the rest are ignored, as -1 entries: a prefill's picks end in -1 padding, which
            the kernels then skip whole chunks of).
    Returns:
        (N, H, D) in q's dtype; a query with no valid row gets 0.
    """
    valid = indices >= 0  # (N, K)
    if row_counts is not None:
        listed = torch.arange(indices.shape[-1], device=indices.device)
        valid = valid & (listed[None, :] < row_counts[:, None])
    rows = kv.double()[indices.clamp(min=0)]  # (N, K, D); fp64 sums: order-independent
    logits = torch.einsum("nhd,nkd->nhk", q.double(), rows) * softmax_scale
    logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
    m = logits.amax(dim=-1, keepdim=True)  # (N, H, 1)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(logits - m)
    denom = p.sum(-1, keepdim=True) + torch.exp(sink.double()[None, :, None] - m)
    res = (torch.einsum("nhk,nkd->nhd", p, rows) / denom).to(q.dtype)
    return res if out is None else out.copy_(res)
