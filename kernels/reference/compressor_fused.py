"""Reference of the chunked compressor pooling, composed from ``reference.compressor``.

``runtime/model/compressor.py`` concatenates the fp32 partial-group state with the chunk's
projections, pools the complete groups and keeps the remainder; this op is the pooling step on
the pair (partial state, chunk) without the concatenation, so a kernel can read both in place.
"""

import torch

from deepinfer.kernels.reference.compressor import compress_pool


def compress_pool_chunk(partial_kv: torch.Tensor, partial_gate: torch.Tensor, kv: torch.Tensor,
                        gate: torch.Tensor, ratio: int) -> torch.Tensor:
    """Pool the complete groups of ``[partial ; chunk]``.

    Args:
        partial_kv, partial_gate: (P, D) fp32, P < ratio buffered tokens of the open group.
        kv, gate: (S, D) fp32 projections of this chunk's tokens.
        ratio: tokens per group.
    Returns:
        (G, D) fp32 with G = (P + S) // ratio; the caller keeps rows G*ratio.. as the new state.
    """
    kv_all = torch.cat([partial_kv, kv])
    gate_all = torch.cat([partial_gate, gate])
    groups = kv_all.shape[0] // ratio
    d = kv_all.shape[-1]
    done = groups * ratio
    return compress_pool(kv_all[:done].view(groups, ratio, d),
                         gate_all[:done].view(groups, ratio, d))


def register_reference_fused() -> None:
    """Register under the reference backend (call from ``register_all``)."""
    from deepinfer.kernels import registry

    registry.register("compress_pool_chunk", registry.REFERENCE, compress_pool_chunk)
