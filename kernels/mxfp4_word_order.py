"""MXFP4 word order: the bits of each 32-bit word of packed e2m1 bytes re-arranged (pure torch).

A stored word (bytes j..j+3 of a weight row, byte a as bits 8a..8a+7) holds 8 e2m1 nibbles, K
elements 2j..2j+7: byte a's low nibble is K = 2j + 2a, its high nibble 2j + 2a + 1 (checkpoint
order, ``formats``). Word order moves each nibble bit to where the Triton expert kernels' split
unpack (``triton/mxfp4_words.py``) lifts it into its bf16x2 register with one rotation and a
mask: K offset k goes to register/half ``_K_SLOT[k]``, the sign bit of register i comes from the
word rotated right by ``SIGN_SHIFTS[i]``, its e1 e0 m bits from the word rotated right by
``MAG_SHIFTS[i]``. The permutation is lossless (every bit used once): ``from_word_order``
undoes ``to_word_order`` bit for bit; the scales are untouched.

Torch only, no triton import: the containers (``quantized.Mxfp4ExpertWeights.word_order``), the
reference ops that dequantize them and the runtime's expert stacks use it on any device.
Conversion runs ``CHUNK_WORDS`` words at a time (int64 temporaries of a few times one chunk), so
a whole layer's stack converts in place without a second copy; CUDA tensors take one Triton
launch instead (``triton/mxfp4_words.permute_words``, imported only then).
"""

from __future__ import annotations

import torch

SIGN_SHIFTS = (0, 1, 2, 3)  # per output register: the rotation its sign bits come from
MAG_SHIFTS = (0, 6, 13, 3)  # ... and its e1 e0 m bits
# K offset (0..7 within the word) -> (output register, half)
_K_SLOT = {0: (0, 0), 2: (0, 1), 4: (1, 0), 6: (1, 1), 1: (2, 0), 3: (2, 1), 5: (3, 0), 7: (3, 1)}
CHUNK_WORDS = 1 << 22
"""Words converted per step (16 MiB of packed bytes)."""


def word_bit_permutation() -> list[int]:
    """perm[b] = where bit b of a checkpoint-order word goes in the word-order word."""
    perm = [-1] * 32
    for k, (reg, half) in _K_SLOT.items():
        byte, high = divmod(k, 2)
        for t in range(4):  # nibble bit t: m, e0, e1, s
            src = 8 * byte + 4 * high + t
            out_bit = (15 if t == 3 else 6 + t) + 16 * half
            shift = SIGN_SHIFTS[reg] if t == 3 else MAG_SHIFTS[reg]
            perm[src] = (out_bit + shift) % 32
    assert sorted(perm) == list(range(32)), "the shifts must use every bit once"
    return perm


def _inverse(perm: list[int]) -> list[int]:
    inverse = [0] * 32
    for src, dst in enumerate(perm):
        inverse[dst] = src
    return inverse


def _rotations(perm: list[int]) -> list[tuple[int, int]]:
    """perm as (right rotation r, destination mask) pairs: out = OR of rotr(w, r) & mask.
    Bits that move by the same amount share one rotation (15 of them for the word order)."""
    masks: dict[int, int] = {}
    for src, dst in enumerate(perm):
        r = (src - dst) % 32
        masks[r] = masks.get(r, 0) | (1 << dst)
    return sorted(masks.items())


def _permute_words(packed: torch.Tensor, perm: list[int],
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """packed uint8/int8 [..., n] (n % 4 == 0) with the bits of each 32-bit word moved by perm,
    into ``out`` (same shape and dtype, contiguous; may be ``packed`` itself) or a new tensor."""
    if packed.dtype not in (torch.uint8, torch.int8) or packed.shape[-1] % 4:
        raise ValueError(f"word order needs uint8/int8 rows of whole 32-bit words, got "
                         f"{packed.dtype} {tuple(packed.shape)}")
    if out is None:
        out = torch.empty_like(packed, memory_format=torch.contiguous_format)
    if out.shape != packed.shape or out.dtype != packed.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {packed.dtype} {tuple(packed.shape)}, got "
                         f"{out.dtype} {tuple(out.shape)}")
    rotations = _rotations(perm)
    if packed.is_cuda:  # one Triton launch (the loop below is ~60 torch launches per call)
        from deepinfer.kernels.triton import mxfp4_words

        return mxfp4_words.permute_words(packed, rotations, out)
    src = packed.contiguous().view(torch.uint8).reshape(-1, 4)  # one row per word
    dst = out.view(torch.uint8).view(-1, 4)
    for w0 in range(0, src.shape[0], CHUNK_WORDS):
        b = src[w0:w0 + CHUNK_WORDS].to(torch.int64)  # a copy: in place (out is packed) is safe
        word = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)
        doubled = word | (word << 32)  # rotr(word, r) = (doubled >> r) & 0xFFFFFFFF
        moved = torch.zeros_like(word)
        for r, mask in rotations:
            moved |= (doubled >> r) & mask
        dst[w0:w0 + CHUNK_WORDS] = torch.stack([(moved >> (8 * a)) & 0xFF for a in range(4)],
                                               dim=-1)
    return out


def to_word_order(packed: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Checkpoint-order MXFP4 bytes [..., I/2] -> word order (same shape and dtype), into
    ``out`` where given (``out=packed``: in place)."""
    return _permute_words(packed, word_bit_permutation(), out)


def from_word_order(packed: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The inverse of ``to_word_order``."""
    return _permute_words(packed, _inverse(word_bit_permutation()), out)
