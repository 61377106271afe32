"""Engram n-gram hash ids and the gate and injection into the hc streams (model-spec §2.9)."""

from typing import Any

import torch

BLOCKED = -1  # a compressed id not looked back at (no history, or an image token)


def engram_rows(table: Any, ids: torch.Tensor) -> torch.Tensor:
    """Rows ``ids`` (int64, any shape) of an engram table -> (*ids.shape, C) bf16: an FP8 table
    (``quantized.Fp8Rows``: codes x 2^(scale - 127) per 32 columns, exact) dequantized only at
    those rows, a plain tensor table indexed as it is."""
    return table[ids]


def engram_inject(x: torch.Tensor, key: torch.Tensor, value: torch.Tensor, wqk: torch.Tensor,
                  eps: float, text_mask: torch.Tensor | None) -> torch.Tensor:
    """``X_i += gate_i * value`` with a signed-sqrt sigmoid gate per stream.

    Args:
        x: (N, S, D) bf16 streams; key: (N, S, D) fp32 or bf16 (one key per stream); value:
        (N, D) fp32 or bf16 (a bf16 key or value enters the fp32 arithmetic exactly);
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
    gate = torch.sigmoid((torch.sign(dot) * torch.sqrt(dot.abs().clamp(min=1e-6))).double()).float()
    if text_mask is not None:
        gate = gate * text_mask[:, None].float()
    return (h + gate.unsqueeze(-1) * value.unsqueeze(1)).to(x.dtype)


def engram_hash_windows(windows: torch.Tensor, constants: Any,
                        check: bool = False) -> torch.Tensor:
    """The engram hash ids (``runtime/model/engram_hash.engram_hash_ids``) from each position's
    look-back window.

    Args:
        windows: ``(..., M) int64``; ``windows[..., i]`` is the compressed id of position
            ``p - (M - 1) + i`` (``BLOCKED`` = not looked back at). Unchecked: ids must be
            ``BLOCKED`` or in ``[0, compressed_vocab_size)``, as ``token_map`` and histories
            built from it are; then no product overflows, and nothing here reads the device
            back (no host sync).
        constants: an EngramHashConstants (``runtime/model/engram_hash.py``: multipliers (L, M),
            primes (L, M-1, H), offsets (L, (M-1)*H) int64, pad_id), read by attribute.
        check: assert that no rolling hash went negative (an int64 overflow; one host sync).
    Returns:
        ``(..., L, (M - 1) * H) int64`` table rows (offsets included).
    """
    num_lookback = constants.max_ngram_size
    tok = lookback_tokens(windows, constants.pad_id)  # (..., M), all >= 0
    device = windows.device
    multipliers = constants.multipliers.to(device)
    primes = constants.primes.to(device)
    offsets = constants.offsets.to(device)
    per_layer = []
    for l in range(len(constants.layer_ids)):
        products = tok * multipliers[l]  # (..., M)
        roll = products[..., 0]
        rolls = []
        for n in range(1, num_lookback):
            roll = torch.bitwise_xor(roll, products[..., n])
            rolls.append(roll)
        rolls_t = torch.stack(rolls, dim=-1)  # (..., M-1)
        # A negative roll would mean int64 overflow (and a remainder the reference never sees);
        # XOR of non-negative products is non-negative, so this only backs up the guard.
        if check:
            assert bool((rolls_t >= 0).all()), "engram rolling hash went negative (int64 overflow)"
        ids = torch.remainder(rolls_t.unsqueeze(-1), primes[l])  # (..., M-1, H)
        per_layer.append(ids.flatten(-2) + offsets[l])  # (..., (M-1)*H)
    return torch.stack(per_layer, dim=-2)


def lookback_tokens(windows: torch.Tensor, pad_id: int) -> torch.Tensor:
    """``(..., M)`` windows -> ``(..., M)`` ids by look-back distance ``k`` (``[..., k]`` = id at
    ``p - k``), ``pad_id`` from the first blocked look-back on."""
    lookback = windows.flip(-1)
    is_blocked = torch.cumsum((lookback == BLOCKED).to(torch.int64), dim=-1) > 0
    return lookback.masked_fill(is_blocked, pad_id)
