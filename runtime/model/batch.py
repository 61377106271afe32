"""ForwardBatch: what one model call processes — chunks of several sequences, flattened."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from deepinfer.runtime.model.cache import CacheView


@dataclass
class ForwardBatch:
    """Tokens of B sequences, each continuing its own cache.

    Sequence b contributes ``seq_lens[b]`` consecutive tokens at flat rows
    ``starts[b] .. starts[b] + seq_lens[b] - 1`` with positions ``caches[b].num_tokens + 0, 1, ..``.
    """

    input_ids: torch.Tensor  # (N,) int64, all sequences' new tokens, concatenated
    positions: torch.Tensor  # (N,) int64 absolute positions
    seq_lens: list[int]  # new tokens per sequence (chunk sizes, >= 1)
    caches: list[CacheView]  # one per sequence, updated in place by the forward
    image_mask: torch.Tensor | None = None  # (N,) bool: token inside an image span
    image_embeds: torch.Tensor | None = None  # (num image tokens, D): overwrite their embeddings

    @classmethod
    def build(cls, chunks: list[list[int]], caches: list[CacheView],
              image_masks: list[list[bool]] | None = None,
              image_embeds: torch.Tensor | None = None) -> ForwardBatch:
        """From per-sequence token lists; positions continue each cache."""
        if len(chunks) != len(caches):
            raise ValueError(f"{len(chunks)} chunks but {len(caches)} caches")
        if any(len(c) == 0 for c in chunks):
            raise ValueError("every sequence in a batch needs at least one new token")
        ids = torch.tensor([t for c in chunks for t in c], dtype=torch.int64)
        pos = torch.cat([torch.arange(len(c)) + cache.num_tokens
                         for c, cache in zip(chunks, caches, strict=True)])
        mask = None
        if image_masks is not None:
            mask = torch.tensor([m for ms in image_masks for m in ms], dtype=torch.bool)
        return cls(ids, pos, [len(c) for c in chunks], caches, mask, image_embeds)

    @property
    def starts(self) -> list[int]:
        out, acc = [], 0
        for n in self.seq_lens:
            out.append(acc)
            acc += n
        return out

    def rows(self, b: int) -> slice:
        """Flat rows of sequence b."""
        start = self.starts[b]
        return slice(start, start + self.seq_lens[b])

    @property
    def last_rows(self) -> torch.Tensor:
        """(B,) flat row of each sequence's last new token."""
        return torch.tensor([s + n - 1 for s, n in zip(self.starts, self.seq_lens, strict=True)])
