"""Interleaved-pair RoPE on the trailing channels, with optional YaRN (model-spec §2.1).

Pairs are adjacent channels ``(2k, 2k+1)`` of the last ``rope_dim`` channels; the leading
channels are untouched. No YaRN magnitude scaling (cos/sin are unscaled).
"""

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Yarn:
    factor: float  # frequencies of the long-wavelength pairs are divided by this
    original_max_position: int  # L0
    beta_fast: float
    beta_slow: float


def rope_inv_freq(rope_dim: int, theta: float, yarn: Yarn | None = None) -> torch.Tensor:
    """(rope_dim // 2,) fp32 frequencies ``theta ** (-2k / rope_dim)``, YaRN-blended if given."""
    k = torch.arange(0, rope_dim, 2, dtype=torch.float32)
    freq = 1.0 / (theta ** (k / rope_dim))
    if yarn is None:
        return freq

    def correction_dim(rotations: float) -> float:
        return rope_dim * math.log(yarn.original_max_position / (2 * math.pi * rotations)) / (
            2 * math.log(theta))

    lo = max(math.floor(correction_dim(yarn.beta_fast)), 0)
    hi = min(math.ceil(correction_dim(yarn.beta_slow)), rope_dim - 1)
    ramp = ((torch.arange(rope_dim // 2, dtype=torch.float32) - lo) / max(hi - lo, 1e-3))
    ramp = ramp.clamp(0, 1)
    return freq / yarn.factor * ramp + freq * (1 - ramp)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor,
               inverse: bool = False, in_place: bool = False) -> torch.Tensor:
    """Rotate the last ``2 * len(inv_freq)`` channels of ``x`` by angle ``position * freq``.

    Args:
        x: (N, ..., Dx) any float dtype; every vector of row n is rotated at positions[n].
        positions: (N,) int64 absolute positions.
        inv_freq: (R/2,) fp32 from :func:`rope_inv_freq`.
        inverse: rotate by the negative angle (removes a rotation).
        in_place: write the rotated channels into x and return x.
    Returns:
        (N, ..., Dx) in x's dtype; channels before the last R are copied unchanged.
    """
    rope_dim = 2 * inv_freq.numel()
    angle = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (N, R/2)
    if inverse:
        angle = -angle
    shape = (angle.shape[0],) + (1,) * (x.dim() - 2) + (angle.shape[1],)
    cos, sin = angle.cos().view(shape), angle.sin().view(shape)
    tail = x[..., -rope_dim:].float().unflatten(-1, (rope_dim // 2, 2))
    a, b = tail[..., 0], tail[..., 1]
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    if in_place:
        x[..., -rope_dim:] = rotated.to(x.dtype)
        return x
    return torch.cat((x[..., :-rope_dim], rotated.to(x.dtype)), dim=-1)
