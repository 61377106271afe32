"""ForwardBatch: what one model call processes — chunks of several sequences, flattened."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import torch

from deepinfer.runtime.device import to_device
from deepinfer.runtime.model.cache import CacheView, shared_window
from deepinfer.runtime.model.window_layout import (
    WindowLayout,
    build_window_layout,
    key_indices,
)


@dataclass
class ForwardBatch:
    """Tokens of B sequences, each continuing its own cache.

    Sequence b contributes ``seq_lens[b]`` consecutive tokens at flat rows
    ``starts[b] .. starts[b] + seq_lens[b] - 1`` with positions ``caches[b].num_tokens + 0, 1, ..``.
    The tensors live on the model's device; the per-sequence bookkeeping (``seq_lens``,
    ``starts``, ``start_positions``) stays on the host, so the model never reads a device
    tensor back to learn a length or a position.
    """

    input_ids: torch.Tensor  # (N,) int64, all sequences' new tokens, concatenated
    positions: torch.Tensor  # (N,) int64 absolute positions
    seq_lens: list[int]  # new tokens per sequence (chunk sizes, >= 1)
    caches: list[CacheView]  # one per sequence, updated in place by the forward
    image_mask: torch.Tensor | None = None  # (N,) bool: token inside an image span
    image_embeds: torch.Tensor | None = None  # (num image tokens, D): overwrite their embeddings
    start_positions: list[int] = field(default_factory=list)  # host: first position per sequence
    id_range: tuple[int, int] | None = None  # host: (min, max) token id, None = empty batch
    last_rows: torch.Tensor | None = None  # (B,) int64 flat row of each sequence's last token
    starts: list[int] = field(init=False)  # host: first flat row per sequence
    _window_layouts: dict[int, WindowLayout] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _window_pool: list = field(default_factory=list, init=False, repr=False, compare=False)
    _window_indices: dict[int, torch.Tensor] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.start_positions:
            self.start_positions = [int(c.num_tokens) for c in self.caches]
        if self.id_range is None and self.input_ids.numel():
            self.id_range = (int(self.input_ids.min()), int(self.input_ids.max()))  # one sync
        self.starts = _starts(self.seq_lens)
        if self.last_rows is None:
            last = [s + n - 1 for s, n in zip(self.starts, self.seq_lens, strict=True)]
            self.last_rows = torch.tensor(last, dtype=torch.int64).to(self.device)

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    @classmethod
    def build(cls, chunks: list[list[int]], caches: list[CacheView],
              image_masks: list[list[bool]] | None = None,
              image_embeds: torch.Tensor | None = None,
              device: torch.device | str = "cpu") -> ForwardBatch:
        """From per-sequence token lists; positions continue each cache. Built on the host,
        copied to ``device`` (token ids, positions, last rows, image mask and embeddings)."""
        if len(chunks) != len(caches):
            raise ValueError(f"{len(chunks)} chunks but {len(caches)} caches")
        if any(len(c) == 0 for c in chunks):
            raise ValueError("every sequence in a batch needs at least one new token")
        starts = [int(cache.num_tokens) for cache in caches]
        lens = [len(c) for c in chunks]
        n = sum(lens)
        # ids, positions and last rows in one host buffer (numpy: a 4K-token chunk's lists
        # convert in ~0.1 ms, torch.tensor took ~0.6), one pinned, asynchronous copy to the
        # device: it queues behind the step in flight instead of waiting for it
        host = np.empty(2 * n + len(chunks), dtype=np.int64)
        flat = host[:n]
        flat[:] = np.fromiter(itertools.chain.from_iterable(chunks), dtype=np.int64, count=n)
        host[n:2 * n] = np.concatenate([np.arange(s, s + k, dtype=np.int64)
                                        for k, s in zip(lens, starts, strict=True)])
        host[2 * n:] = [s + k - 1 for s, k in zip(_starts(lens), lens, strict=True)]
        packed = to_device(host, device)
        mask = None
        if image_masks is not None:
            mask = to_device(np.fromiter(itertools.chain.from_iterable(image_masks), dtype=bool,
                                         count=n), device)
        if image_embeds is not None:
            image_embeds = image_embeds.to(device)
        return cls(packed[:n], packed[n:2 * n], lens, caches, mask, image_embeds, starts,
                   (int(flat.min()), int(flat.max())), packed[2 * n:])

    def rows(self, b: int) -> slice:
        """Flat rows of sequence b."""
        start = self.starts[b]
        return slice(start, start + self.seq_lens[b])

    def window_pool(self) -> tuple[torch.Tensor, list[int]] | None:
        """The pool all the batch's window rings share and their state slots, or None
        (``model/cache.py`` shared_window); asked once per forward."""
        if not self._window_pool:  # asked: [the answer]
            self._window_pool.append(shared_window(self.caches))
        return self._window_pool[0]

    def window_layout(self, window: int) -> WindowLayout:
        """Where every sequence's window keys and ring writes lie for a sliding window of
        ``window`` positions (``model/window_layout.py``); built once, shared by the layers."""
        if window not in self._window_layouts:
            shared = self.window_pool()
            self._window_layouts[window] = build_window_layout(
                self.seq_lens, self.start_positions, window, self.device,
                None if shared is None else shared[1])
        return self._window_layouts[window]

    def window_indices(self, window: int) -> torch.Tensor:
        """(N, W) int64 key rows of each query's window (``window_layout.key_indices``): the
        same for every layer, so built once per forward (~10 launches a layer before)."""
        if window not in self._window_indices:
            self._window_indices[window] = key_indices(self.window_layout(window),
                                                       self.positions, window)
        return self._window_indices[window]


def _starts(seq_lens: list[int]) -> list[int]:
    """First flat row of each sequence (exclusive prefix sums of ``seq_lens``)."""
    out, acc = [], 0
    for n in seq_lens:
        out.append(acc)
        acc += n
    return out
