"""Reference semantics of the fused attention-side kernels, composed from the reference ops.

Each function is what the model computes today in several steps (see ``runtime/model``), written
as one op so that a fused kernel has an oracle:

* :func:`sparse_attention_sink_records`: attention straight over the packed caches;
* :func:`window_kv_records` / :func:`write_window_kv`: kv-norm + RoPE + Q8_32 into 528-B window
  records (the second scatters them into the ring);
* :func:`compressed_kv_records`: RoPE + Q4E4_16 into 288-B compressed records;
* :func:`index_key_records`: k-norm + RoPE + Q4E8_32 into 68-B index-key records;
* :func:`index_scores_records`: indexer scores over packed index keys with the visibility rule;
* :func:`index_scores_paged`: the same, each query over its own entries in a paged key pool.
"""

import torch

from deepinfer.kernels import formats
from deepinfer.kernels.reference import attention, indexer, norm, rope


def sparse_attention_sink_records(q: torch.Tensor, window: torch.Tensor,
                                  window_indices: torch.Tensor, compressed: torch.Tensor | None,
                                  compressed_indices: torch.Tensor | None, sink: torch.Tensor,
                                  softmax_scale: float) -> torch.Tensor:
    """One softmax over window rows and compressed rows, each addressed by its own list.

    Args:
        q: (N, H, D). window: uint8 (W, D + D/32) window records. window_indices: (N, Kw) rows
        of ``window`` (-1 ignored). compressed: uint8 (T, D/2 + D/16) records or None;
        compressed_indices: (N, Kc) rows of ``compressed`` (-1 ignored) or None.
        sink: (H,) fp32. softmax_scale: 1/sqrt(D).
    Returns:
        (N, H, D) in q's dtype (as :func:`attention.sparse_attention_sink` over the
        concatenation ``[window ; compressed]`` with the compressed list offset by W).
    """
    d = q.shape[-1]
    keys = formats.unpack_window_kv(window, d, torch.float32)
    indices = window_indices.to(torch.int64)
    if compressed is not None and compressed_indices is not None:
        entries = formats.unpack_compressed_kv(compressed, d, torch.float32)
        offset = keys.shape[0]
        ci = compressed_indices.to(torch.int64)
        keys = torch.cat([keys, entries])
        indices = torch.cat([indices, torch.where(ci >= 0, ci + offset, ci)], dim=1)
    return attention.sparse_attention_sink(q, keys, indices, sink, softmax_scale)


def window_kv_records(x: torch.Tensor, weight: torch.Tensor, eps: float,
                      positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """(N, D) wkv projections -> uint8 (N, D + D/32) records of Q8_32(rope(rms_norm(x)))
    (rounded to x's dtype after the norm and after RoPE, as the model does)."""
    kv = norm.rms_norm(x, weight, eps)
    return formats.pack_window_kv(rope.apply_rope(kv, positions, inv_freq))


def compressed_kv_records(latents: torch.Tensor, positions: torch.Tensor,
                          inv_freq: torch.Tensor) -> torch.Tensor:
    """(G, D) pre-RoPE latents -> uint8 (G, D/2 + D/16) records of Q4E4_16(rope(latents))."""
    return formats.pack_compressed_kv(rope.apply_rope(latents, positions, inv_freq))


def index_key_records(x: torch.Tensor, weight: torch.Tensor, eps: float,
                      positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """(G, Di) wk projections -> uint8 (G, Di/2 + Di/32) records of Q4E8_32(rope(rms_norm(x)))."""
    key = norm.rms_norm(x, weight, eps)
    return formats.pack_index_key(rope.apply_rope(key, positions, inv_freq))


def index_scores_records(q: torch.Tensor, head_weights: torch.Tensor, key_records: torch.Tensor,
                         num_visible: torch.Tensor) -> torch.Tensor:
    """Indexer scores over packed index keys, -inf where entry t >= num_visible[n].

    Args: q (N, Hi, Di) FP4-grid queries; head_weights (N, Hi) fp32; key_records uint8
    (T, Di/2 + Di/32); num_visible (N,) int64. Returns (N, T) fp32.
    """
    keys = formats.unpack_index_key(key_records, q.shape[-1], torch.float32)
    return indexer.mask_invisible(indexer.index_scores(q, head_weights, keys), num_visible)


PAGED_SCORE_CHUNK = 2048
"""Entries per step of :func:`index_scores_paged` (bounds its fp64 temporaries: N x 2048 x Di)."""


def index_scores_paged(q: torch.Tensor, head_weights: torch.Tensor, key_pool: torch.Tensor,
                       block_tables: torch.Tensor, num_visible: torch.Tensor,
                       entries_per_block: int, width: int) -> torch.Tensor:
    """Indexer scores of each query row over its own visible entries of a paged key pool.

    Entry t of row n is pool row ``block_tables[n, t // entries_per_block] * entries_per_block
    + t % entries_per_block``; only entries t < num_visible[n] are read (the block-table columns
    past them may hold anything). The output width is static (CUDA-graph friendly).

    Args:
        q: (N, Hi, Di) FP4-grid queries; head_weights: (N, Hi) fp32 (already scaled);
        key_pool: uint8 (R, Di/2 + Di/32) index-key records; block_tables: int64 (N, MB);
        num_visible: int64 (N,); entries_per_block, width: ints.
    Returns:
        (N, width) fp32: ``sum_h w[n, h] * relu(q[n, h] . key(t))`` for t < num_visible[n],
        -inf elsewhere; bit-equal to :func:`indexer.index_scores` of each row over its own keys
        followed by :func:`indexer.mask_invisible`.
    """
    n, d = q.shape[0], q.shape[-1]
    out = torch.full((n, width), float("-inf"), device=q.device)
    if n == 0 or width == 0 or block_tables.shape[1] == 0 or key_pool.shape[0] == 0:
        return out  # nothing can be visible
    qd, wd = q.double(), head_weights.double()
    for c0 in range(0, width, PAGED_SCORE_CHUNK):
        c1 = min(width, c0 + PAGED_SCORE_CHUNK)
        t = torch.arange(c0, c1, device=q.device)
        visible = t[None, :] < num_visible[:, None]  # (N, C)
        col = torch.where(visible, t // entries_per_block, 0)  # never index an unused column
        rows = block_tables.gather(1, col) * entries_per_block + t % entries_per_block
        rows = torch.where(visible, rows, 0)  # invisible entries read row 0, then are masked
        keys = formats.unpack_index_key(key_pool[rows], d, torch.float32)  # (N, C, Di)
        dots = torch.einsum("nhd,ntd->nht", qd, keys.double()).relu()
        scores = torch.einsum("nht,nh->nt", dots, wd).float()  # fp64 sums, as index_scores
        out[:, c0:c1] = scores.masked_fill(~visible, float("-inf"))
    return out


def register_reference_fused() -> None:
    """Register these ops under the reference backend (call from ``register_all``)."""
    from deepinfer.kernels import registry

    for op, fn in {
        "sparse_attention_sink_records": sparse_attention_sink_records,
        "window_kv_records": window_kv_records,
        "write_window_kv": write_window_kv,
        "compressed_kv_records": compressed_kv_records,
        "index_key_records": index_key_records,
        "index_scores_records": index_scores_records,
        "index_scores_paged": index_scores_paged,
    }.items():
        registry.register(op, registry.REFERENCE, fn)


def write_window_kv(x: torch.Tensor, weight: torch.Tensor, eps: float, positions: torch.Tensor,
                    inv_freq: torch.Tensor, ring: torch.Tensor) -> torch.Tensor:
    """:func:`window_kv_records` written into ``ring[positions % W]`` (only the last W rows of
    the call, as ``runtime/model/attention.py`` does); returns ``ring``."""
    w = ring.shape[0]
    tail = slice(max(0, x.shape[0] - w), x.shape[0])
    ring[positions[tail] % w] = window_kv_records(x[tail], weight, eps, positions[tail], inv_freq)
    return ring
