"""Token sampling and logprobs: the reference ops ``sample_tokens`` and ``token_logprobs``.

Randomness is counter-based: the uniform of vocabulary entry ``v`` for a row is a pure function
of ``(seed, position, v)`` (:func:`uniform_noise`, a splitmix64 mixer in int64 torch ops), never
of a shared generator's state. A request therefore samples the same tokens whatever batch it
sits in, in whatever row, and across runs; any backend reproduces it bit for bit by porting
:func:`mix64` (64-bit wrapping multiply, logical shifts).

Sampling is Gumbel-max over the filtered, temperature-scaled logits ("exponential race"):
``argmax_v (z_v - log(-log(u_v)))`` draws ``v`` with probability ``softmax(z)_v``. Filters keep,
in this order: the ``top_k`` largest scaled logits, the tokens with ``p_v >= min_p * max(p)``,
and the smallest prefix (by descending probability, renormalised over the survivors) whose mass
reaches ``top_p``; the most probable token always survives. Ties are broken by the lower index
everywhere (greedy, top-k ranks, the race). The scaled logits are fp32; softmax normalisers,
the nucleus cumulative sum and the race run in fp64 so that a row's result does not depend on
the batch shape.
"""

from __future__ import annotations

import torch

GOLDEN_GAMMA = 0x9E3779B97F4A7C15 - (1 << 64)  # splitmix64 increment, as int64
_MIX_C1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX_C2 = 0x94D049BB133111EB - (1 << 64)
_U53_SCALE = 2.0**-53


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 (two's-complement wrapping): a bijection of 64-bit words."""
    x = (x ^ _shr(x, 30)) * _MIX_C1
    x = (x ^ _shr(x, 27)) * _MIX_C2
    return x ^ _shr(x, 31)


def row_keys(seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(rows,) int64 stream key of each row: ``mix64(mix64(seed) + (position + 1) * GAMMA)``."""
    return mix64(mix64(seeds.to(torch.int64)) + (positions.to(torch.int64) + 1) * GOLDEN_GAMMA)


def uniform_noise(seeds: torch.Tensor, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Uniforms in (0, 1), one per (row, vocabulary entry), from (seed, position, entry) only.

    Args:
        seeds: (rows,) int64 request seeds.
        positions: (rows,) int64 output positions (0 for a request's first sampled token).
        vocab_size: V.
    Returns:
        (rows, V) float64: ``((mix64(key + (v + 1) * GAMMA) >>> 11) + 0.5) * 2^-53``.
    """
    keys = row_keys(seeds, positions)[:, None]
    counters = (torch.arange(vocab_size, dtype=torch.int64, device=seeds.device) + 1) * GOLDEN_GAMMA
    bits53 = _shr(mix64(keys + counters[None, :]), 11)
    return (bits53.to(torch.float64) + 0.5) * _U53_SCALE


def _first_argmax(x: torch.Tensor) -> torch.Tensor:
    """(rows,) index of each row's maximum, the lowest index among equal maxima."""
    index = torch.arange(x.shape[-1], device=x.device).expand_as(x)
    is_max = x == x.max(dim=-1, keepdim=True).values
    return torch.where(is_max, index, x.shape[-1]).min(dim=-1).values


def filter_mask(scaled_logits: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor,
                min_p: torch.Tensor) -> torch.Tensor:
    """(rows, V) bool: the tokens that survive top-k, then min-p, then top-p.

    Args:
        scaled_logits: (rows, V) float32, already divided by the temperature.
        top_p: (rows,) float32 in (0, 1]; 1 keeps everything.
        top_k: (rows,) int64; <= 0 keeps everything.
        min_p: (rows,) float32 in [0, 1]; 0 keeps everything.
    """
    num_rows, vocab_size = scaled_logits.shape
    # Descending stable sort: equal logits keep ascending index order, so ranks are exact.
    sorted_logits, order = torch.sort(scaled_logits, dim=-1, descending=True, stable=True)
    rank = torch.arange(vocab_size, device=scaled_logits.device).expand(num_rows, vocab_size)
    k = torch.where(top_k > 0, top_k.clamp(max=vocab_size), vocab_size).to(torch.int64)
    keep = rank < k[:, None]
    probs = torch.softmax(sorted_logits.double(), dim=-1)  # (rows, V) fp64, sorted
    keep &= probs >= min_p.double()[:, None] * probs[:, :1]
    kept = torch.where(keep, probs, 0.0)
    kept = kept / kept.sum(dim=-1, keepdim=True)
    mass_before = torch.cumsum(kept, dim=-1) - kept  # exclusive prefix sum
    keep &= (mass_before < top_p.double()[:, None]) | (top_p >= 1.0)[:, None]
    keep[:, 0] = True  # the most probable token always survives
    return torch.zeros_like(keep).scatter_(1, order, keep)


def sample_tokens(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
                  top_k: torch.Tensor, min_p: torch.Tensor, seeds: torch.Tensor,
                  positions: torch.Tensor) -> torch.Tensor:
    """One token per row (see the module docstring for the algorithm).

    Args:
        logits: (rows, V) float32 raw logits; -inf entries are never sampled; a row holding NaN
            gets token -1 (flagged on the device, no host sync: the caller raises when it
            copies the tokens back).
        temperature: (rows,) float32 >= 0; 0 = greedy (argmax of the raw logits).
        top_p, top_k, min_p: (rows,) as in :func:`filter_mask`.
        seeds: (rows,) int64 request seeds.
        positions: (rows,) int64 output position of the token being sampled.
    Returns:
        (rows,) int64 token ids, -1 for rows with NaN logits.
    """
    if logits.dtype != torch.float32 or logits.dim() != 2:
        raise ValueError(f"logits must be (rows, vocab) float32, got {tuple(logits.shape)} "
                         f"{logits.dtype}")
    if logits.shape[0] == 0:
        return torch.zeros(0, dtype=torch.int64, device=logits.device)
    is_greedy = temperature <= 0
    safe_temperature = torch.where(is_greedy, 1.0, temperature).to(torch.float32)
    scaled = logits / safe_temperature[:, None]  # fp32
    keep = filter_mask(scaled, top_p, top_k, min_p)
    gumbel = -torch.log(-torch.log(uniform_noise(seeds, positions, logits.shape[1])))
    race = torch.where(keep, scaled.double() + gumbel, -torch.inf)
    sampled = _first_argmax(race)
    tokens = torch.where(is_greedy, _first_argmax(logits), sampled)
    return torch.where(torch.isnan(logits).any(dim=-1), -1, tokens)


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """:func:`sample_tokens` when every row is greedy (temperature 0), without the filtering
    and noise of the sampled path: (rows, V) float32 -> (rows,) int64 first argmax, -1 for a
    row holding NaN (the same tokens, bit for bit)."""
    if logits.dtype != torch.float32 or logits.dim() != 2:
        raise ValueError(f"logits must be (rows, vocab) float32, got {tuple(logits.shape)} "
                         f"{logits.dtype}")
    if logits.shape[0] == 0:
        return torch.zeros(0, dtype=torch.int64, device=logits.device)
    return torch.where(torch.isnan(logits).any(dim=-1), -1, _first_argmax(logits))


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor,
                   num_top: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probabilities of the raw (not temperature-scaled, unfiltered) distribution.

    Args:
        logits: (rows, V) float32 raw logits.
        token_ids: (rows,) int64 sampled tokens.
        num_top: how many of the most probable tokens to return per row (>= 0).
    Returns:
        ``(sampled_logprobs, top_ids, top_logprobs)``: (rows,) float32, (rows, num_top) int64,
        (rows, num_top) float32; top entries by descending logprob, lower index first on ties.
    """
    logprobs = torch.log_softmax(logits.double(), dim=-1)  # fp64 normaliser
    sampled = logprobs.gather(1, token_ids.to(torch.int64)[:, None])[:, 0].float()
    top_lp, top_ids = torch.sort(logprobs, dim=-1, descending=True, stable=True)
    return sampled, top_ids[:, :num_top], top_lp[:, :num_top].float()

