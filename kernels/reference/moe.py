"""MoE routing (sqrtsoftplus, bias-steered top-k) and routed SwiGLU experts (model-spec §2.8).

Expert weights are plain tensors or the containers of ``kernels/quantized.py``; routed experts
in ``Mxfp4ExpertWeights`` (checkpoint or word byte order) are dequantized one expert at a
time, only those a batch routes to.
"""

import torch

from deepinfer.kernels.quantized import Mxfp4ExpertWeights
from deepinfer.kernels.reference.linear import Weight, linear_quant_act


def stable_topk(values: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest values per row; ties go to the lower index (deterministic)."""
    order = torch.sort(values, dim=-1, descending=True, stable=True).indices
    return order[..., :k]


def route_sqrtsoftplus(x: torch.Tensor, gate_weight: torch.Tensor, bias: torch.Tensor,
                       bias_vl: torch.Tensor | None, image_mask: torch.Tensor | None, topk: int,
                       route_scale: float, gate_temp: float = 1.0, normalize: bool = True
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose experts per token.

    Args:
        x: (N, D) bf16. gate_weight: (E, D). bias, bias_vl: (E,) fp32 (selection only;
        bias_vl for tokens inside image spans). image_mask: (N,) bool or None.
    Returns:
        weights (N, topk) fp32 from the unbiased scores, normalized by (sum + 1e-20) and
        scaled by route_scale; expert ids (N, topk) int64.
    """
    logits = (x.double() @ gate_weight.double().t()).float()  # fp64 sums, fp32 result
    soft = torch.nn.functional.softplus((logits / gate_temp).double())  # fp64: row-invariant
    scores = torch.sqrt(soft.float())  # (N, E)
    sel_bias = bias.float().expand_as(scores)
    if image_mask is not None and bias_vl is not None:
        sel_bias = torch.where(image_mask[:, None], bias_vl.float()[None, :], sel_bias)
    idx = stable_topk(scores + sel_bias, topk)
    w = scores.gather(1, idx)
    if normalize and topk > 1:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return w * route_scale, idx


def swiglu_limit(gate: torch.Tensor, up: torch.Tensor, limit: float) -> torch.Tensor:
    """``silu(min(gate, limit)) * clamp(up, -limit, limit)`` in fp32."""
    g = gate.float().clamp(max=limit)
    u = up.float().clamp(-limit, limit)
    return torch.nn.functional.silu(g.double()).float() * u


def expert_ffn(x: torch.Tensor, w1: Weight, w3: Weight, w2: Weight,
               limit: float, route_weight: torch.Tensor | None = None,
               x_rounded: bool = False) -> torch.Tensor:
    """One SwiGLU expert; the routing weight multiplies the activation BEFORE ``w2``.

    Args:
        x: (N, D) bf16; w1, w3: (I, D); w2: (D, I), each a plain tensor, an ``Fp8BlockWeight``
        (the shared expert) or a 1-expert ``Mxfp4ExpertWeights``; route_weight: (N,) fp32 or None.
        x_rounded: x already holds its Q8_32 values (a hint for the kernels, which may skip
        their rounding of x; rounding Q8_32 values again gives them back, so here it changes
        nothing).
    Returns:
        (N, D) bf16.
    """
    h = swiglu_limit(linear_quant_act(x, w1), linear_quant_act(x, w3), limit)
    if route_weight is not None:
        h = route_weight[:, None] * h
    return linear_quant_act(h.to(x.dtype), w2)


def moe_routed_experts(x: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor,
                       w1: torch.Tensor | Mxfp4ExpertWeights, w3: torch.Tensor | Mxfp4ExpertWeights,
                       w2: torch.Tensor | Mxfp4ExpertWeights, limit: float,
                       combine_ids: torch.Tensor | None = None,
                       residual: torch.Tensor | None = None,
                       x_rounded: bool = False) -> torch.Tensor:
    """Sum of the chosen experts' outputs per token, fp32 (with ``residual``: + residual in
    fp32, rounded to residual's dtype). ``x_rounded``: as :func:`expert_ffn`'s.

    Args:
        x: (N, D) bf16; expert_ids, weights: (N, K); w1, w3: (E, I, D); w2: (E, D, I), plain
        tensors or ``Mxfp4ExpertWeights`` (only the routed experts are dequantized).
        combine_ids: (N, K) distinct ids per token that order its sum (default expert_ids): the
        logical experts when expert_ids name physical slots holding replicas.
        residual: (N, D), the shared expert's output (optional).
    Returns:
        (N, D) fp32, each token's picks added from zero in increasing (combine) id (independent
        of the batch); with ``residual``, that sum + residual in residual's dtype.
    """
    y = torch.zeros(*expert_ids.shape, x.shape[1], dtype=torch.float32, device=x.device)
    for e in torch.unique(expert_ids).tolist():
        tok, pick = (expert_ids == e).nonzero(as_tuple=True)
        y[tok, pick] = expert_ffn(x[tok], one_expert(w1, e), one_expert(w3, e), one_expert(w2, e),
                                  limit, weights[tok, pick]).float()
    out = combine_in_expert_order(y, expert_ids if combine_ids is None else combine_ids)
    # fp32 + residual.dtype promotes in the add (the same values as an explicit .float() first)
    return out if residual is None else (out + residual).to(residual.dtype)


def combine_in_expert_order(y: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """(n, K, D) per-pick outputs, (n, K) distinct ids -> (n, D) fp32, each token's picks added
    from zero in increasing id."""
    order = torch.argsort(ids, dim=1)
    rows = torch.arange(ids.shape[0], device=y.device)
    out = torch.zeros(ids.shape[0], y.shape[-1], dtype=torch.float32, device=y.device)
    for pick in range(ids.shape[1]):
        out += y[rows, order[:, pick]]
    return out


def one_expert(w: torch.Tensor | Mxfp4ExpertWeights, e: int) -> Weight:
    """Expert e of a stack: (O, I) of a tensor, a 1-expert view of a container."""
    return w.select(e) if isinstance(w, Mxfp4ExpertWeights) else w[e]
