"""Engram n-gram hashing: compressed token ids -> per-layer embedding-table row ids.

A pure function of the tokenizer map and the config (model-spec §2.9 "Hashing"); no weights.
It must be bit-exact, or every engram table lookup fetches the wrong rows.

Index spaces used below:
  * token id       -- the tokenizer's id, ``[0, vocab_size)``.
  * compressed id  -- ``token_map[token id]``, ``[0, compressed_vocab_size)``; ``BLOCKED`` (-1)
                      marks a position that may not be looked back at (before the sequence start,
                      or an image-span token, "DEAD").
  * hash id        -- a row of one engram layer's table, ``[0, num_embeddings[layer])``.

With ``M = max_ngram_size`` and ``H = n_heads`` each position gets ``(M - 1) * H`` hash ids per
engram layer: n-gram orders 2..M (order-major) times heads (head-minor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from deepinfer.kernels.reference.engram import BLOCKED, engram_hash_windows, lookback_tokens

"""Compressed id of a position that is before the sequence start or inside an image span."""

_INT64_MAX = 2**63 - 1
_SEED_PER_LAYER = 10007
_MILLER_RABIN_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)


@dataclass(frozen=True, eq=False)  # tensor fields: compare by identity
class EngramHashConstants:
    """Everything ``engram_hash_ids`` needs, for ``L`` engram layers.

    Attributes:
        layer_ids: ``L`` decoder layer indices carrying an engram, in config order.
        primes: ``(L, M - 1, H) int64``; table sizes per (layer, n-gram order 2..M, head).
        offsets: ``(L, (M - 1) * H) int64``; start row of each (order, head) sub-table inside the
            layer's single table: exclusive prefix sums of ``primes[l].flatten()`` (order-major,
            head-minor), so ``offsets[l, 0] == 0``.
        multipliers: ``(L, M) int64``; odd hash multiplier per look-back distance 0..M-1.
        num_embeddings: ``L`` table row counts, ``primes[l].sum()``.
        pad_id: compressed id used for blocked look-backs (``token_map[pad token id]``).
    """

    layer_ids: tuple[int, ...]
    primes: torch.Tensor
    offsets: torch.Tensor
    multipliers: torch.Tensor
    num_embeddings: tuple[int, ...]
    pad_id: int

    @property
    def max_ngram_size(self) -> int:
        return self.multipliers.shape[1]

    @property
    def n_heads(self) -> int:
        return self.primes.shape[2]


def is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin; exact for every ``n < 3.3e24`` (so for any int64)."""
    if n < 2:
        return False
    for p in _MILLER_RABIN_BASES:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in _MILLER_RABIN_BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _smallest_unused_prime(start: int, used: set[int]) -> int:
    candidate = start
    while candidate in used or not is_prime(candidate):
        candidate += 1
    return candidate


def _multipliers(layer_id: int, max_ngram_size: int, compressed_vocab_size: int) -> list[int]:
    """Odd multipliers ``2*v + 1`` with ``v < (2**63 - 1) // compressed_vocab_size // 2``.

    The bound makes ``multiplier * compressed_id`` fit in int64 for any compressed id, and XOR of
    non-negative int64 values stays non-negative, so the rolling hash never overflows.
    """
    bound = _INT64_MAX // compressed_vocab_size // 2
    rng = np.random.default_rng(seed=_SEED_PER_LAYER * layer_id)
    draws = rng.integers(0, bound, size=max_ngram_size, dtype=np.int64)
    return [2 * int(v) + 1 for v in draws]


def make_engram_hash_constants(
    layer_ids: tuple[int, ...] | list[int],
    max_ngram_size: int,
    n_heads: int,
    engram_vocab_size: int,
    compressed_vocab_size: int,
    compressed_pad_id: int,
) -> EngramHashConstants:
    """Build the hash constants of model-spec §2.9 from config values.

    Primes: for each layer in order, each n-gram order 2..M, each head, the smallest prime
    ``>= engram_vocab_size`` not already used (one "used" set across all layers).
    Multipliers: seeded per layer with ``10007 * layer_id`` (see ``_multipliers``).
    """
    if max_ngram_size < 2 or n_heads < 1:
        raise ValueError(
            f"need max_ngram_size >= 2 and n_heads >= 1, got {max_ngram_size}, {n_heads}"
        )
    if not 0 <= compressed_pad_id < compressed_vocab_size:
        raise ValueError(
            f"compressed_pad_id {compressed_pad_id} outside [0, {compressed_vocab_size})"
        )
    used: set[int] = set()
    primes: list[list[list[int]]] = []
    for _ in layer_ids:
        layer_primes = []
        for _order in range(2, max_ngram_size + 1):
            order_primes = []
            for _head in range(n_heads):
                prime = _smallest_unused_prime(engram_vocab_size, used)
                used.add(prime)
                order_primes.append(prime)
            layer_primes.append(order_primes)
        primes.append(layer_primes)

    primes_t = torch.tensor(primes, dtype=torch.int64).reshape(
        len(layer_ids), max_ngram_size - 1, n_heads
    )
    flat = primes_t.flatten(1)  # (L, (M-1)*H)
    offsets = torch.cumsum(flat, dim=1) - flat  # exclusive prefix sums
    multipliers = torch.tensor(
        [_multipliers(l, max_ngram_size, compressed_vocab_size) for l in layer_ids],
        dtype=torch.int64,
    ).reshape(len(layer_ids), max_ngram_size)
    return EngramHashConstants(
        layer_ids=tuple(int(l) for l in layer_ids),
        primes=primes_t,
        offsets=offsets,
        multipliers=multipliers,
        num_embeddings=tuple(int(s) for s in flat.sum(dim=1)),
        pad_id=int(compressed_pad_id),
    )


def empty_history(batch_size: int, max_ngram_size: int,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """History for sequences that start now: ``(batch_size, max_ngram_size - 1) int64`` of -1."""
    return torch.full((batch_size, max_ngram_size - 1), BLOCKED, dtype=torch.int64,
                      device=device)


def compressed_context(
    token_map: torch.Tensor,
    input_ids: torch.Tensor,
    history: torch.Tensor,
    image_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Map one chunk of token ids to the compressed context ``engram_hash_ids`` reads.

    Args:
        token_map: ``(vocab_size,) int64``, token id -> compressed id.
        input_ids: ``(B, S) int64`` token ids of the chunk.
        history: ``(B, M - 1) int64`` compressed ids of the ``M - 1`` positions before the chunk,
            oldest first; ``BLOCKED`` (-1) where there is none or it was an image token.
            Use ``empty_history`` at the start of a sequence.
        image_mask: ``(B, S) bool`` or None; True marks image-span tokens (stored as ``BLOCKED``).

    Returns:
        ``(context, new_history)``: context ``(B, M - 1 + S) int64`` = history followed by the
        chunk's compressed ids; new_history ``(B, M - 1) int64`` = its last ``M - 1`` entries,
        to pass with the next chunk.
    """
    compressed = token_map[input_ids]
    if image_mask is not None:
        compressed = compressed.masked_fill(image_mask, BLOCKED)
    context = torch.cat([history.to(torch.int64), compressed.to(torch.int64)], dim=1)
    num_history = history.shape[1]
    new_history = context[:, context.shape[1] - num_history :].clone()
    return context, new_history


def engram_hash_ids(context_ids: torch.Tensor, constants: EngramHashConstants) -> torch.Tensor:
    """Hash ids of every position of a chunk, for every engram layer.

    Args:
        context_ids: ``(B, M - 1 + S) int64`` compressed ids of positions ``p - (M - 1)`` ..
            ``p + S - 1`` (see ``compressed_context``); ``BLOCKED`` (-1) = not looked back at.
        constants: from ``make_engram_hash_constants``.

    Returns:
        ``(B, S, L, (M - 1) * H) int64``; entry ``[b, s, l, (n - 2) * H + h]`` is the row of the
        order-``n`` head-``h`` sub-table of layer ``l`` (offset included).

    Per position, with look-back ``k = 0..M-1`` (``k = 0`` is the position itself): once one
    look-back is blocked, it and all further ones read ``pad_id``. Then
    ``roll = tok[0] * mult[0]``; for ``n = 1..M-1``: ``roll ^= tok[n] * mult[n]`` and the
    order-``n+1`` ids are ``roll % prime + offset``.
    """
    num_lookback = constants.max_ngram_size
    if context_ids.dim() != 2 or context_ids.shape[1] < num_lookback - 1:
        raise ValueError(
            f"context_ids must be (B, {num_lookback - 1} + S), got {tuple(context_ids.shape)}"
        )
    context_ids = context_ids.to(torch.int64)
    batch_size = context_ids.shape[0]
    num_positions = context_ids.shape[1] - (num_lookback - 1)
    num_layers = len(constants.layer_ids)
    num_ids = (num_lookback - 1) * constants.n_heads
    if num_positions == 0 or batch_size == 0:
        return torch.zeros(
            batch_size,
            num_positions,
            num_layers,
            num_ids,
            dtype=torch.int64,
            device=context_ids.device,
        )
    if bool((context_ids < BLOCKED).any()):
        raise ValueError("context_ids must be compressed ids >= 0 or BLOCKED (-1)")

    # windows[b, s, i] = context[b, s + i]; look-back k is window index M-1-k.
    windows = context_ids.unfold(1, num_lookback, 1)  # (B, S, M)
    # Overflow guard: every product tok * mult must stay below 2**63 (the multiplier bound
    # promises this only for ids below compressed_vocab_size).
    max_tok = int(lookback_tokens(windows, constants.pad_id).max())
    max_mult = int(constants.multipliers.max())
    if max_tok > _INT64_MAX // max_mult:
        raise ValueError(f"compressed id {max_tok} too large for the hash multipliers")
    return engram_hash_windows(windows, constants, check=True)
