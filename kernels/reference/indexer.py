"""Indexer scoring, two-level candidate selection and position-sorted top-k (model-spec §2.6)."""

import torch

from deepinfer.kernels.reference.moe import stable_topk


def index_scores(q: torch.Tensor, head_weights: torch.Tensor, keys: torch.Tensor,
                 num_visible: torch.Tensor | None = None) -> torch.Tensor:
    """``score[n, t] = sum_h w[n, h] * relu(q[n, h] . keys[t])`` in fp32.

    Args:
        q: (N, Hi, Di) FP4-grid queries; head_weights: (N, Hi) fp32 (already scaled);
        keys: (T, Di) FP4-grid index keys; num_visible: (N,) int or None — given, every
        score at t >= num_visible[n] is -inf (``mask_invisible``: a kernel may then skip the
        key tiles no query of its block sees).
    Returns:
        (N, T) fp32.
    """
    dots = torch.einsum("nhd,td->nht", q.double(), keys.double()).relu()
    scores = torch.einsum("nht,nh->nt", dots, head_weights.double()).float()  # fp64 sums
    return scores if num_visible is None else mask_invisible(scores, num_visible)


def mask_invisible(scores: torch.Tensor, num_visible: torch.Tensor) -> torch.Tensor:
    """-inf where entry t >= num_visible[n] (its group is not complete for query n)."""
    t = torch.arange(scores.shape[-1], device=scores.device)
    return scores.masked_fill(t[None, :] >= num_visible[:, None], float("-inf"))


def select_candidate_blocks(scores: torch.Tensor, num_visible: torch.Tensor, num_blocks: int,
                            block_size: int) -> torch.Tensor:
    """Keep the best ``num_blocks`` blocks of ``block_size`` entries per query.

    A block's score is its max; the block holding the newest visible entry is always kept;
    blocks with no finite score are never kept.
    Args:
        scores: (N, T) fp32 with -inf on invisible entries; num_visible: (N,) int64.
    Returns:
        (N, T) bool candidate mask.
    """
    n, t = scores.shape
    nb = -(-t // block_size)
    padded = torch.full((n, nb * block_size), float("-inf"), device=scores.device)
    padded[:, :t] = scores
    blk = padded.view(n, nb, block_size).amax(-1)  # (N, nb)
    # the newest visible block is always kept (rows with nothing visible keep their -inf);
    # a scatter, not boolean-mask indexing: no host sync (the decode step is graph-captured)
    newest = torch.div(num_visible - 1, block_size, rounding_mode="floor").clamp(min=0)[:, None]
    keep_newest = torch.where((num_visible > 0)[:, None], float("inf"), blk.gather(1, newest))
    blk.scatter_(1, newest, keep_newest)
    keep = stable_topk(blk, min(num_blocks, nb))  # (N, kb)
    kept = torch.zeros(n, nb, dtype=torch.bool, device=scores.device)
    kept.scatter_(1, keep, blk.gather(1, keep) > float("-inf"))
    return kept.repeat_interleave(block_size, dim=1)[:, :t]


def topk_positions(scores: torch.Tensor, k: int,
                   num_visible: torch.Tensor | None = None) -> torch.Tensor:
    """Top-k entries per query, sorted by position, -1 for picks with a -inf score.

    Ties are broken towards the lower position. Args: scores (N, T) fp32 with -inf on
    entries a query may not pick; num_visible (N,) or None: a promise that every score at or
    beyond it is -inf (kernels may skip that part; the result is the same). Returns
    (N, min(k, T)) int64.
    """
    k = min(k, scores.shape[-1])
    idx = stable_topk(scores, k)
    idx = torch.where(scores.gather(1, idx) > float("-inf"), idx, torch.full_like(idx, -1))
    valid_first = torch.where(idx >= 0, idx, torch.full_like(idx, torch.iinfo(torch.int64).max))
    idx = valid_first.sort(dim=-1).values
    return torch.where(idx == torch.iinfo(torch.int64).max, torch.full_like(idx, -1), idx)
