"""MXFP4 expert weights in the W4A8 kernel order (torch only): the lossless load-time layout
that ``kernels/triton/moe_gluon_w4a8.py`` reads (and the prefill kernels, and ``moe_experts``'
folded tiles, W_W4A8).

Inside each 128-K step of a weight row (64 bytes = 16 words; ``to_w4a8_words``): word 4 q + G
holds, for 32-K group G and quad lane q, the 8 nibbles of K = 32 G + 4 q + b ("lo", b < 4) and
32 G + 16 + 4 q + b ("hi"), placed so that the FP8 wgmma A fragment's e4m3 codes (value * 2^-6)
come out of
    lo = w & 0x9C9C9C9C,   hi = (rotl(w, 2) & 0x88888888) | (rotl(w, 4) & 0x14141414)
lo byte b: s e1 e0 m at bits 8b + 7, 4, 3, 2; hi byte b: s at 8b + 5, e1 at 8b, e0 at 8b + 1,
m at 8((b - 1) mod 4) + 6. A pure permutation of the bits of each step.

The rows' steps then lie in step tiles (``to_step_tiles``, ``TILE_ROWS`` = 128): per tile of
128 rows, step s of all its rows is one contiguous run of 8 KB — (O / 128, K / 128, 128, 64)
bytes per expert, in the (E, O, K/2) tensor. A kernel program's weight box (64 or 128 rows,
one step) is then one sequential read, not 64-byte pieces 64 rows apart: the decode GEMMs'
gated launch 3-4 % faster on the H200 (rounds 108a-111a, docs/performance.md session 20).
The byte at (row r, step s, offset j) of an expert sits at
    (r // 128) * 128 * K/2 + s * 8192 + (r % 128) * 64 + j;
a TMA box of rows [r0, r0 + R) (R | 128, r0 a multiple of R) at step s is row
``tile_row(r0, steps) + 128 s`` of the [E * O * K/128, 64] view.

``to_w4a8_order`` = step tiles of the words, ``from_w4a8_order`` undoes it exactly. CUDA
tensors convert in one Triton launch (``moe_gluon_w4a8.to_kernel_order_gpu``, imported only
then).
"""

from __future__ import annotations

import torch

STEP_K = 128  # K per step of the order (a row's K must be a multiple)
TILE_ROWS = 128  # rows per step tile (a stack's rows per expert must be a multiple)


def _e4m3_fields(nib: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """e2m1 nibbles (int64) -> their bits (s, e1, e0, m)."""
    return (nib >> 3) & 1, (nib >> 2) & 1, (nib >> 1) & 1, nib & 1


def tile_row(row0: int, steps: int) -> int:
    """The [E * O * K/128, 64] view's row of step 0 of rows [row0, ...) of the flattened
    (E * O) rows (host twin of the kernels' arithmetic)."""
    return (row0 // TILE_ROWS) * steps * TILE_ROWS + row0 % TILE_ROWS


def to_w4a8_order(packed: torch.Tensor) -> torch.Tensor:
    """Checkpoint-order MXFP4 bytes (..., O, K/2) -> the W4A8 kernel order (same shape, uint8):
    ``to_w4a8_words`` in ``to_step_tiles``. O: a multiple of ``TILE_ROWS``."""
    assert packed.dim() >= 2 and packed.shape[-2] % TILE_ROWS == 0, (packed.shape, TILE_ROWS)
    if packed.is_cuda:
        from deepinfer.kernels.triton.moe_gluon_w4a8 import to_kernel_order_gpu
        return to_kernel_order_gpu(packed).view(torch.uint8)
    return to_step_tiles(to_w4a8_words(packed), TILE_ROWS)


def from_w4a8_order(tiled: torch.Tensor) -> torch.Tensor:
    """Inverse of ``to_w4a8_order``: W4A8-order bytes (..., O, K/2) -> checkpoint order (same
    dtype)."""
    return from_w4a8_words(from_step_tiles(tiled, TILE_ROWS))


def to_w4a8_words(packed: torch.Tensor) -> torch.Tensor:
    """Checkpoint-order MXFP4 bytes (..., K/2) -> each row's W4A8 words (same shape, uint8; no
    step tiles), converted one leading index at a time (the int64 temporaries are 64x the
    bytes).

    Inside each 128-K step of a row: word 4 q + G (bytes 16 q + 4 G ..) holds, for group G
    and quad lane q, the nibbles of K = 32 G + 4 q + b ("lo", byte b: s e1 e0 m at bits
    8b + 7, 4, 3, 2) and K = 32 G + 16 + 4 q + b ("hi": s at 8b + 5, e1 at 8b, e0 at 8b + 1,
    m at 8((b - 1) mod 4) + 6)."""
    if packed.dim() > 2:
        out = torch.empty(packed.shape, dtype=torch.uint8, device=packed.device)
        for e in range(packed.shape[0]):
            out[e] = to_w4a8_words(packed[e])
        return out
    half = packed.shape[-1]
    assert half % (STEP_K // 2) == 0, (packed.shape, STEP_K)
    p = packed.view(torch.uint8).to(torch.int64)
    nib = torch.stack([p & 0xF, p >> 4], dim=-1).reshape(*p.shape[:-1], half * 2)  # K order
    lead = nib.shape[:-1]
    nib = nib.reshape(*lead, half * 2 // STEP_K, 4, 2, 4, 4)  # steps, G, t, q, b
    nib = nib.movedim(-2, -4)  # steps, q, G, t, b
    lo, hi = nib[..., 0, :], nib[..., 1, :]  # (..., steps, q, G, b)
    word = torch.zeros(lo.shape[:-1], dtype=torch.int64, device=packed.device)
    for b in range(4):
        s, e1, e0, m = _e4m3_fields(lo[..., b])
        word |= (s << (8 * b + 7)) | (e1 << (8 * b + 4)) | (e0 << (8 * b + 3)) | (m << (8 * b + 2))
        s, e1, e0, m = _e4m3_fields(hi[..., b])
        word |= ((s << (8 * b + 5)) | (e1 << (8 * b)) | (e0 << (8 * b + 1))
                 | (m << (8 * ((b - 1) % 4) + 6)))
    word = torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)
    return word.contiguous().view(torch.uint8).reshape(packed.shape)


def from_w4a8_words(words: torch.Tensor) -> torch.Tensor:
    """Inverse of ``to_w4a8_words``: each row's W4A8 words (..., K/2) -> checkpoint order (same
    dtype), one leading index at a time."""
    if words.dim() > 2:
        return torch.stack([from_w4a8_words(w) for w in words])
    half = words.shape[-1]
    w = words.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    w = w.reshape(*w.shape[:-1], half * 2 // STEP_K, 4, 4)  # steps, q, G
    bit = lambda pos: (w >> pos) & 1  # noqa: E731
    lo = [(bit(8 * b + 7) << 3) | (bit(8 * b + 4) << 2) | (bit(8 * b + 3) << 1) | bit(8 * b + 2)
          for b in range(4)]
    hi = [(bit(8 * b + 5) << 3) | (bit(8 * b) << 2) | (bit(8 * b + 1) << 1)
          | bit(8 * ((b + 3) % 4) + 6) for b in range(4)]
    nib = torch.stack([torch.stack(lo, -1), torch.stack(hi, -1)], -2)  # steps q G t b
    nib = nib.movedim(-4, -2)  # steps, G, t, q, b: natural K order inside a step
    nib = nib.reshape(*nib.shape[:-5], half * 2)
    return (nib[..., 0::2] | (nib[..., 1::2] << 4)).to(torch.uint8).view(words.dtype)


def unpack_twin(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The asm's lo / hi registers from int32 words (torch twin, for the tests)."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    rotl = lambda v, n: ((v << n) | (v >> (32 - n))) & 0xFFFFFFFF  # noqa: E731
    lo = w & 0x9C9C9C9C
    hi = (rotl(w, 2) & 0x88888888) | (rotl(w, 4) & 0x14141414)
    return lo, hi


def to_step_tiles(words: torch.Tensor, tile_rows: int) -> torch.Tensor:
    """Row-major bytes (..., O, K/2) -> the same bytes in step tiles (same shape): per leading
    index, (O / tile_rows, K / 128, tile_rows, 64) — one 128-K step of ``tile_rows`` rows is
    one contiguous run of 64 * tile_rows bytes. One leading index at a time (no whole-stack
    temporary)."""
    steps = words.shape[-1] // (STEP_K // 2)
    assert words.shape[-2] % tile_rows == 0 and words.shape[-1] % (STEP_K // 2) == 0, (
        words.shape, tile_rows)
    return _per_matrix(words, lambda m: _swap_middle(m, tile_rows, steps))


def from_step_tiles(tiled: torch.Tensor, tile_rows: int) -> torch.Tensor:
    """Inverse of ``to_step_tiles``."""
    steps = tiled.shape[-1] // (STEP_K // 2)
    return _per_matrix(tiled, lambda m: _swap_middle(m, steps, tile_rows))


def _swap_middle(m: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """A (rows, K/2) matrix viewed as (n, a, b, 64) with the middle axes swapped, back in its
    shape."""
    return m.reshape(-1, a, b, STEP_K // 2).transpose(1, 2).contiguous().reshape(m.shape)


def _per_matrix(t: torch.Tensor, fn) -> torch.Tensor:
    """fn over each trailing (rows, K/2) matrix of t, one at a time (no whole-stack temporary)."""
    if t.dim() <= 2:
        return fn(t)
    out = torch.empty_like(t)
    for e in range(t.shape[0]):
        out[e] = _per_matrix(t[e], fn)
    return out
