"""Manifold-constrained hyper-connections (model-spec §2.3): coefficients, collapse, expand."""

import torch

from deepinfer.kernels.reference.norm import rms_norm
from deepinfer.kernels.reference.quant import fake_quant_fp8_block32


def hc_coeffs(x: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor,
              norm_eps: float, hc_eps: float, sinkhorn_iters: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(pre, post, comb) of one mHC site from its input streams.

    Args:
        x: (N, S, D) bf16 streams of N tokens (S = hc_mult).
        fn: (2S + S*S, S*D) fp32 projection; scale: (3,) fp32; base: (2S + S*S,) fp32.
    Returns:
        pre (N, S) fp32 (sigmoid + hc_eps), post (N, S) fp32 (2 * sigmoid),
        comb (N, S, S) fp32 with comb[n, i, j] mapping input stream i to output stream j,
        doubly normalized by Sinkhorn (starting with a column normalization).
    """
    n_streams = x.shape[1]
    v = x.flatten(1).float()  # (N, S*D), stream-major
    r = torch.rsqrt(v.double().pow(2).mean(-1, keepdim=True).float() + norm_eps)
    m = (v.double() @ fn.double().t()).float() * r  # (N, 2S + S*S); fp64 sums

    s = n_streams
    pre = torch.sigmoid((m[:, :s] * scale[0] + base[:s]).double()).float() + hc_eps
    post = 2 * torch.sigmoid((m[:, s:2 * s] * scale[1] + base[s:2 * s]).double()).float()
    comb = (m[:, 2 * s:] * scale[2] + base[2 * s:]).view(-1, s, s)
    comb = torch.softmax(comb.double(), dim=-1).float() + hc_eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + hc_eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    return pre, post, comb


def hc_collapse(x: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """(N, S, D) streams, (N, S) fp32 weights -> (N, D) in x's dtype: sum_i pre_i * x_i."""
    return (pre.unsqueeze(-1).double() * x.double()).sum(dim=1).to(x.dtype)


def hc_expand(out: torch.Tensor, x: torch.Tensor, post: torch.Tensor,
              comb: torch.Tensor) -> torch.Tensor:
    """New streams Y_j = post_j * out + sum_i comb[i, j] * x_i.

    Args:
        out: (N, D) block output; x: (N, S, D) residual streams; post: (N, S); comb: (N, S, S).
    Returns:
        (N, S, D) in x's dtype.
    """
    mixed = torch.einsum("nij,nid->njd", comb.double(), x.double())
    return (post.unsqueeze(-1).double() * out.double().unsqueeze(1) + mixed).to(x.dtype)


def hc_expand_norm(out: torch.Tensor, x: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
                   pre: torch.Tensor, weight: torch.Tensor, eps: float, quant: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One site's expand and the next site's normalized input from the new streams:
    ``y = hc_expand(out, x, post, comb)``, ``h = rms_norm(hc_collapse(y, pre), weight, eps)``
    and, with ``quant``, h's Q8_32 values ``hq = fake_quant_fp8_block32(h)`` (what the site's
    quantized projections read), else None.

    Args:
        out, x, post, comb: as :func:`hc_expand`; pre: (N, S) fp32, the next site's collapse
        weights (known before this expand: single-pass mHC); weight: (D,) its RMSNorm weight.
    Returns:
        y (N, S, D), h (N, D) and hq (N, D) or None, all in x's dtype (h from y's rounded
        values, itself rounded once before the norm, as the separate ops give it).
    """
    y = hc_expand(out, x, post, comb)
    h = rms_norm(hc_collapse(y, pre), weight, eps)
    return y, h, fake_quant_fp8_block32(h) if quant else None
