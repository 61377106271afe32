"""Compressor pooling of complete token groups (model-spec §2.5)."""

import torch


def compress_pool(kv: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Per-channel softmax over each group's tokens, weighting their projections.

    Args:
        kv: (G, R, D) fp32 projections of the R tokens of G complete groups.
        gate: (G, R, D) fp32 gate logits.
    Returns:
        (G, D) fp32 pooled latents.
    """
    w = torch.softmax(gate.double(), dim=1).float()
    return (w.double() * kv.double()).sum(dim=1).float()
