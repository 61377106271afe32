"""Engram gate and injection into the hc streams (model-spec §2.9)."""

import torch


def engram_inject(x: torch.Tensor, key: torch.Tensor, value: torch.Tensor, wqk: torch.Tensor,
                  eps: float, text_mask: torch.Tensor | None) -> torch.Tensor:
    """``X_i += gate_i * value`` with a signed-sqrt sigmoid gate per stream.

    Args:
        x: (N, S, D) bf16 streams; key: (N, S, D) fp32 (one key per stream); value: (N, D) fp32;
        wqk: (S, D) fp32 product of the q and k weights; text_mask: (N,) bool, False inside
        image spans (gate forced to 0) or None.
    Returns:
        (N, S, D) bf16.
    """
    h = x.float()
    dim = h.shape[-1]
    rstd = (torch.rsqrt(h.double().pow(2).mean(-1).float() + eps)
            * torch.rsqrt(key.double().pow(2).mean(-1).float() + eps))
    dot = (h * wqk[None] * key).double().sum(-1).float() * rstd / dim ** 0.5  # (N, S)
    gate = torch.sigmoid(torch.sign(dot) * torch.sqrt(dot.abs().clamp(min=1e-6)))
    if text_mask is not None:
        gate = gate * text_mask[:, None].float()
    return (h + gate.unsqueeze(-1) * value.unsqueeze(1)).to(x.dtype)
