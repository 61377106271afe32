"""Explicit per-sequence caches of the V4.1 backbone (model-spec §3).

A :class:`SequenceCache` holds everything a sequence needs to continue from ``num_tokens``:

* ``window[l]``: uint8 (W, window_record_bytes) ring per backbone layer; the token at position
  p lives in slot ``p % W``. Record = head_dim e4m3 codes then head_dim/32 ue8m0 scale bytes
  (528 B released).
* ``compressed[s]``: uint8 (T, compressed_record_bytes) per KV-source layer s, one FP4 entry per
  completed group of ``ratio`` tokens (288 B released: 256 B packed e2m1 + 32 e4m3 scales).
* ``index_keys[s]``: uint8 (T, index_key_record_bytes) per KV-source layer (68 B released).
* ``partial_kv[s]``, ``partial_gate[s]``: fp32 (k, head_dim) projections of the k < ratio tokens of
  the incomplete group of a ratio > 1 source (the compressor's partial-group state).
* ``engram_history``: int64 (max_ngram - 1,) compressed token ids of the last positions (-1 =
  before the start or an image-span token).

The model touches a cache only through the methods below (``window_ring``, ``entries``,
``index_key_records``, ``num_entries``, ``append_entries``, ``partial``, ``set_partial``,
``engram_history``, ``num_tokens``): the runtime's paged form (``runtime/cache_pool.py``, blocks
and state slots) implements the same methods over shared pools, and may serve a whole batch's
appends and reads in one op (``append_entries_all``, ``entries_all``, ``shared_window``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Protocol

import torch

from deepinfer.artifacts.model_spec import ModelSpec


class CacheView(Protocol):
    """What the model reads and writes of one sequence's cache (see the module docstring)."""

    num_tokens: int
    engram_history: torch.Tensor

    def window_ring(self, layer: int) -> torch.Tensor: ...
    def num_entries(self, source_layer: int) -> int: ...
    def entries(self, source_layer: int) -> torch.Tensor: ...
    def index_key_records(self, source_layer: int) -> torch.Tensor: ...
    def append_entries(self, source_layer: int, entries: torch.Tensor,
                       keys: torch.Tensor) -> None: ...
    def partial(self, source_layer: int) -> tuple[torch.Tensor, torch.Tensor]: ...
    def set_partial(self, source_layer: int, kv: torch.Tensor, gate: torch.Tensor) -> None: ...


def append_entries_all(caches: list[CacheView], source_layer: int, entries: torch.Tensor,
                       keys: torch.Tensor, counts: list[int]) -> None:
    """Append to each cache its slice of ``entries`` / ``keys`` ((sum counts, bytes), batch
    order, ``counts[b]`` rows for ``caches[b]``): one write for all when the caches' type offers
    ``append_entries_many`` and it takes them (the paged pool), else per sequence."""
    many = getattr(type(caches[0]), "append_entries_many", None)
    if many is not None and many(caches, source_layer, entries, keys, counts):
        return
    done = 0
    for cache, n in zip(caches, counts, strict=True):
        if n:
            cache.append_entries(source_layer, entries[done:done + n], keys[done:done + n])
        done += n


def entries_all(caches: list[CacheView], source_layer: int) -> tuple[torch.Tensor, list[int]]:
    """Every cache's (T_b, compressed_record_bytes) entries of a KV source, concatenated in
    batch order, and the T_b: one gather when the caches' type offers ``entries_many`` and it
    takes them (the paged pool), else per sequence."""
    many = getattr(type(caches[0]), "entries_many", None)
    got = many(caches, source_layer) if many is not None else None
    if got is not None:
        return got
    records = [cache.entries(source_layer) for cache in caches]
    joined = records[0] if len(records) == 1 else torch.cat(records)
    return joined, [r.shape[0] for r in records]


def shared_window(caches: list[CacheView]) -> tuple[torch.Tensor, list[int]] | None:
    """The (slots, layers, W, window_record_bytes) pool every cache's window ring lives in and
    each cache's state slot, when the caches' type offers ``window_pool_many`` and they share
    one pool (the paged cache); else None (rings per sequence: ``window_ring``)."""
    if not caches:
        return None
    many = getattr(type(caches[0]), "window_pool_many", None)
    return many(caches) if many is not None else None


@dataclass
class SequenceCache:
    """The contiguous form: plain tensors per sequence (tests, one-at-a-time runs)."""

    num_tokens: int
    window: list[torch.Tensor]
    compressed: dict[int, torch.Tensor]
    index_keys: dict[int, torch.Tensor]
    partial_kv: dict[int, torch.Tensor]
    partial_gate: dict[int, torch.Tensor]
    engram_history: torch.Tensor
    sliding_window: int = field(default=0)

    @classmethod
    def empty(cls, spec: ModelSpec, device: torch.device | str = "cpu") -> SequenceCache:
        """A fresh cache on ``device`` for a sequence that has seen no token."""
        w_bytes = spec.window_record_bytes
        srcs = spec.kv_source_layer_ids
        d = spec.head_dim
        u8 = dict(dtype=torch.uint8, device=device)
        grouped = [s for s in srcs if spec.layers[s].compress_ratio > 1]
        return cls(
            num_tokens=0,
            window=[torch.zeros(spec.sliding_window, w_bytes, **u8)
                    for _ in range(spec.num_hidden_layers)],
            compressed={s: torch.zeros(0, spec.compressed_record_bytes, **u8) for s in srcs},
            index_keys={s: torch.zeros(0, spec.index_key_record_bytes, **u8) for s in srcs},
            partial_kv={s: torch.zeros(0, d, device=device) for s in grouped},
            partial_gate={s: torch.zeros(0, d, device=device) for s in grouped},
            engram_history=torch.full((spec.engram_max_ngram_size - 1,), -1, dtype=torch.int64,
                                      device=device),
            sliding_window=spec.sliding_window,
        )

    def window_ring(self, layer: int) -> torch.Tensor:
        """(W, window_record_bytes) uint8 ring of a backbone layer (writable view)."""
        return self.window[layer]

    def num_entries(self, source_layer: int) -> int:
        """Compressed entries (completed groups) of a KV source layer."""
        return self.compressed[source_layer].shape[0]

    def entries(self, source_layer: int) -> torch.Tensor:
        """(T, compressed_record_bytes) uint8 FP4 entries of a KV source layer."""
        return self.compressed[source_layer]

    def index_key_records(self, source_layer: int) -> torch.Tensor:
        """(T, index_key_record_bytes) uint8 FP4 index keys of a KV source layer."""
        return self.index_keys[source_layer]

    def append_entries(self, source_layer: int, entries: torch.Tensor,
                       keys: torch.Tensor) -> None:
        """Append (G, 288) entries and their (G, 68) index keys after the existing ones."""
        s = source_layer
        self.compressed[s] = torch.cat([self.compressed[s], entries])
        self.index_keys[s] = torch.cat([self.index_keys[s], keys])

    def partial(self, source_layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 (k, Dh) ``kv`` and ``gate`` of the incomplete group, k = num_tokens % ratio."""
        return self.partial_kv[source_layer], self.partial_gate[source_layer]

    def set_partial(self, source_layer: int, kv: torch.Tensor, gate: torch.Tensor) -> None:
        """Replace the incomplete group's state (k < ratio rows)."""
        self.partial_kv[source_layer] = kv.clone()
        self.partial_gate[source_layer] = gate.clone()

    def clone(self) -> SequenceCache:
        """A deep copy (a forked sequence continues independently)."""
        return copy.deepcopy(self)

    def nbytes(self) -> int:
        """Bytes held by this cache (window rings + growing entries + partial state)."""
        tensors = (self.window + list(self.compressed.values()) + list(self.index_keys.values())
                   + list(self.partial_kv.values()) + list(self.partial_gate.values()))
        return sum(t.numel() * t.element_size() for t in tensors)
