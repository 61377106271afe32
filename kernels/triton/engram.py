"""Engram n-gram hashing, and gate and injection (model-spec §2.9).

``engram_hash_windows`` (reference ``reference.engram.engram_hash_windows``, same contract):
one program per BP positions; per position the M look-backs are read from its window,
blocked look-backs (and all further ones) become pad_id, then for every engram layer the int64
rolling hash ``roll = tok0*m0; roll ^= tok_n*m_n`` gives (M-1)*H ids ``roll % prime + offset``.
Products cannot overflow int64: the multipliers are bounded by (2^63-1) // compressed_vocab.
The table gather is ``engram_rows.engram_rows`` (FP8 table rows -> bf16 rows, one launch),
then the ``wkv`` projection a ``linear``.

``engram_inject`` (reference ``engram.engram_inject``):

One program per token handles all S streams: pass 1 streams D in BLOCK_D chunks and accumulates,
per stream, sum(h²), sum(key²) and sum(h * wqk * key) in fp32; the gate
    gate_i = sigmoid(sign(dot_i) * sqrt(max(|dot_i|, 1e-6))),
    dot_i = sum(h*wqk*key) * rsqrt(mean(h²)+eps) * rsqrt(mean(key²)+eps) / sqrt(D)
is zeroed for image tokens; pass 2 writes X_i + gate_i * value (cast to x's dtype).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import quant_act
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2


@triton.jit
def _engram_inject_kernel(x_ptr, key_ptr, value_ptr, wqk_ptr, mask_ptr, y_ptr, D,
                          stride_xn, stride_xs, stride_kn, stride_ks, stride_vn, stride_ws, eps,
                          HAS_MASK: tl.constexpr, S: tl.constexpr, BLOCK_D: tl.constexpr):
    n = tl.program_id(0).to(tl.int64)
    streams = tl.arange(0, S)
    offs = tl.arange(0, BLOCK_D)
    sum_h2 = tl.zeros((S, BLOCK_D), dtype=tl.float32)
    sum_k2 = tl.zeros((S, BLOCK_D), dtype=tl.float32)
    sum_dot = tl.zeros((S, BLOCK_D), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        cols = d0 + offs
        mask = (cols < D)[None, :]
        h = tl.load(x_ptr + n * stride_xn + streams[:, None] * stride_xs + cols[None, :],
                    mask=mask, other=0.0).to(tl.float32)
        k = tl.load(key_ptr + n * stride_kn + streams[:, None] * stride_ks + cols[None, :],
                    mask=mask, other=0.0).to(tl.float32)
        w = tl.load(wqk_ptr + streams[:, None] * stride_ws + cols[None, :], mask=mask,
                    other=0.0).to(tl.float32)
        sum_h2 += h * h
        sum_k2 += k * k
        sum_dot += h * w * k
    rstd = (1.0 / tl.sqrt_rn(tl.sum(sum_h2, axis=1) / D + eps)) \
        * (1.0 / tl.sqrt_rn(tl.sum(sum_k2, axis=1) / D + eps))
    dot = tl.sum(sum_dot, axis=1) * rstd / tl.sqrt_rn(D.to(tl.float32))  # [S]
    sign = tl.where(dot > 0, 1.0, tl.where(dot < 0, -1.0, 0.0))
    gate = 1.0 / (1.0 + tl.exp(-(sign * tl.sqrt_rn(tl.maximum(tl.abs(dot), 1e-6)))))
    if HAS_MASK:
        gate = gate * (tl.load(mask_ptr + n) != 0).to(tl.float32)
    for d0 in range(0, D, BLOCK_D):
        cols = d0 + offs
        mask = (cols < D)[None, :]
        h = tl.load(x_ptr + n * stride_xn + streams[:, None] * stride_xs + cols[None, :],
                    mask=mask, other=0.0).to(tl.float32)
        v = tl.load(value_ptr + n * stride_vn + cols, mask=cols < D, other=0.0).to(tl.float32)
        y = h + gate[:, None] * v[None, :]
        tl.store(y_ptr + n * stride_xn + streams[:, None] * stride_xs + cols[None, :],
                 y.to(y_ptr.dtype.element_ty), mask=mask)


def engram_inject(x: torch.Tensor, key: torch.Tensor, value: torch.Tensor, wqk: torch.Tensor,
                  eps: float, text_mask: torch.Tensor | None) -> torch.Tensor:
    """Registered op: x (N, S, D), key (N, S, D) fp32 or bf16, value (N, D) fp32 or bf16 (the
    engram projection's output as it is: loaded and upcast exactly), wqk (S, D) fp32,
    text_mask (N,) bool or None -> (N, S, D) in x's dtype."""
    num_tokens, s, dim = x.shape
    assert s & (s - 1) == 0, f"engram_inject: S={s} must be a power of two"
    x = x.contiguous()
    key = key if key.stride(-1) == 1 else key.contiguous()
    value = value if value.stride(-1) == 1 else value.contiguous()
    wqk = wqk.to(torch.float32).contiguous()
    y = torch.empty_like(x)
    if num_tokens == 0:
        return y
    mask = text_mask.to(torch.int8).contiguous() if text_mask is not None else wqk
    block_d = min(512, next_power_of_2(dim))
    _engram_inject_kernel[(num_tokens,)](
        x, key, value, wqk, mask, y, dim, x.stride(0), x.stride(1), key.stride(0), key.stride(1),
        value.stride(0), wqk.stride(0), float(eps), HAS_MASK=text_mask is not None, S=s,
        BLOCK_D=block_d, num_warps=4)
    return y


@triton.jit
def _engram_hash_kernel(win_ptr, mult_ptr, prime_ptr, offset_ptr, out_ptr, num_rows, stride_wr,
                        stride_wm, pad_id, L: tl.constexpr, M: tl.constexpr, H: tl.constexpr,
                        HP: tl.constexpr, BP: tl.constexpr):
    """BP look-back windows (M ids, oldest first) -> their L x (M-1)H table rows."""
    q = tl.program_id(0) * BP + tl.arange(0, BP)  # window (row) index
    mask_q = q < num_rows
    q = tl.where(mask_q, q, 0).to(tl.int64)
    heads = tl.arange(0, HP)
    mask_h = heads < H
    num_ids: tl.constexpr = (M - 1) * H
    for layer in tl.static_range(L):
        blocked = tl.zeros((BP,), dtype=tl.int1)
        roll = tl.zeros((BP,), dtype=tl.int64)
        for k in tl.static_range(M):  # look-back k reads window[q, M - 1 - k]
            raw = tl.load(win_ptr + q * stride_wr + (M - 1 - k) * stride_wm, mask=mask_q,
                          other=0)
            blocked = blocked | (raw < 0)
            tok = tl.where(blocked, pad_id, raw).to(tl.int64)
            prod = tok * tl.load(mult_ptr + layer * M + k)
            if k == 0:
                roll = prod
            else:
                roll = roll ^ prod
                base = layer * num_ids + (k - 1) * H
                prime = tl.load(prime_ptr + base + heads, mask=mask_h, other=1)
                offset = tl.load(offset_ptr + base + heads, mask=mask_h, other=0)
                ids = roll[:, None] % prime[None, :] + offset[None, :]  # [BP, HP]
                out_off = q[:, None] * (L * num_ids) + base + heads[None, :]
                tl.store(out_ptr + out_off, ids, mask=mask_q[:, None] & mask_h[None, :])


def engram_hash_windows(windows: torch.Tensor, constants) -> torch.Tensor:
    """Registered op ``engram_hash_windows`` (reference ``reference.engram.engram_hash_windows``,
    same contract), one launch.

    Args:
        windows: (..., M) int64 compressed ids of each position's look-back window, oldest
            first, -1 = blocked (any strides).
        constants: an EngramHashConstants (primes (L, M-1, H), offsets (L, (M-1)*H),
            multipliers (L, M) int64, pad_id); read by attribute only.
    Returns:
        (..., L, (M - 1) * H) int64.
    """
    multipliers = constants.multipliers.to(device=windows.device, dtype=torch.int64)
    num_layers, num_lookback = multipliers.shape
    primes = constants.primes.to(device=windows.device, dtype=torch.int64).contiguous()
    offsets = constants.offsets.to(device=windows.device, dtype=torch.int64).contiguous()
    n_heads = primes.shape[2]
    assert windows.shape[-1] == num_lookback, \
        f"engram_hash_windows: windows {tuple(windows.shape)}, expected {num_lookback} ids each"
    win = windows.reshape(-1, num_lookback)
    if win.dtype != torch.int64:
        win = win.to(torch.int64)
    out = torch.empty((win.shape[0], num_layers, (num_lookback - 1) * n_heads),
                      dtype=torch.int64, device=windows.device)
    if win.shape[0]:
        block_p = 64
        _engram_hash_kernel[(cdiv(win.shape[0], block_p),)](
            win, multipliers.contiguous(), primes, offsets, out, win.shape[0], win.stride(0),
            win.stride(1), int(constants.pad_id), L=num_layers, M=num_lookback, H=n_heads,
            HP=max(2, next_power_of_2(n_heads)), BP=block_p, num_warps=4)
    return out.reshape(*windows.shape[:-1], num_layers, (num_lookback - 1) * n_heads)


def supports_engram(spec: dict) -> bool:
    """CUDA SM90+; ``hc_mult`` (optional) a power of two."""
    hc = spec.get("hc_mult", 4)
    return quant_act.is_cuda_sm90_plus(spec) and hc & (hc - 1) == 0
