"""Reference semantics of the fused attention-side kernels, composed from the reference ops.

Each function is what the model computes today in several steps (see ``runtime/model``), written
as one op so that a fused kernel has an oracle:

* :func:`sparse_attention_sink_records`: attention straight over the packed caches;
* :func:`window_kv_records` / :func:`write_window_kv`: kv-norm + RoPE + Q8_32 into 528-B window
  records (the second scatters them into the ring);
* :func:`compressed_kv_records`: RoPE + Q4E4_16 into 288-B compressed records;
* :func:`index_key_records`: k-norm + RoPE + Q4E8_32 into 68-B index-key records;
* :func:`index_scores_records`: indexer scores over packed index keys with the visibility rule.
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
