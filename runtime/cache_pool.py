"""The paged cache: one pool per cache kind, shared by every sequence (architecture.md §6).

Two kinds of storage, allocated together by the C++ block manager:

* **Blocks** (``num_blocks`` of ``block_size_tokens`` tokens each) hold what grows with the
  context: per KV-source layer ``s`` of ratio ``r``, ``block_size_tokens // r`` FP4 compressed
  entries (``compressed_record_bytes`` each, 288 B released) and as many FP4 index keys (68 B).
  Entry ``e`` of a sequence lives in block ``block_table[e // entries_per_block]`` at row
  ``e % entries_per_block``. Block 0 is the sentinel no sequence owns.
* **State slots** (``num_state_slots``) hold what is fixed per sequence: the FP8 window ring of
  every layer (W records of 528 B), the compressor's fp32 partial group of each ratio > 1 source,
  and the engram n-gram history. Slot 0 is the sentinel.

A slot or block handed to a new sequence is not cleared: a sequence only ever reads positions it
wrote itself (ring slots of its last W positions, entries below its count, ``num_tokens % r``
partial rows), except the engram history, which :meth:`CachePool.view` resets at position 0.

:class:`PagedSequenceCache` is one sequence's view; it implements the model's cache methods
(``runtime/model/cache.py``), so the model runs unchanged on pooled storage.
"""

from __future__ import annotations

import numpy as np
import torch

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.runtime.device import to_device

__all__ = ["CachePool", "PagedSequenceCache"]


class CachePool:
    """Every cache tensor of one rank, sized by the plan's cache layout.

    Args:
        spec: the model; block_size_tokens: tokens per block (a multiple of every ratio);
        num_blocks, num_state_slots: including the sentinels 0.
    """

    def __init__(self, spec: ModelSpec, num_blocks: int, num_state_slots: int,
                 block_size_tokens: int, device: torch.device | str = "cpu"):
        self.spec = spec
        self.block_size_tokens = block_size_tokens
        self.num_blocks, self.num_state_slots = num_blocks, num_state_slots
        self.device = torch.device(device)
        u8 = dict(dtype=torch.uint8, device=device)
        self.ratio = {s: spec.layers[s].compress_ratio for s in spec.kv_source_layer_ids}
        for s, r in self.ratio.items():
            if block_size_tokens % r:
                raise ValueError(f"block_size_tokens {block_size_tokens} is not a multiple of "
                                 f"layer {s}'s compress ratio {r}")
        self.entries_per_block = {s: block_size_tokens // r for s, r in self.ratio.items()}
        self.window = torch.zeros(num_state_slots, spec.num_hidden_layers, spec.sliding_window,
                                  spec.window_record_bytes, **u8)
        self.entries = {s: torch.zeros(num_blocks, n, spec.compressed_record_bytes, **u8)
                        for s, n in self.entries_per_block.items()}
        self.index_keys = {s: torch.zeros(num_blocks, n, spec.index_key_record_bytes, **u8)
                           for s, n in self.entries_per_block.items()}
        grouped = {s: r for s, r in self.ratio.items() if r > 1}
        self.partial_kv = {s: torch.zeros(num_state_slots, r - 1, spec.head_dim, device=device)
                           for s, r in grouped.items()}
        self.partial_gate = {s: torch.zeros_like(t) for s, t in self.partial_kv.items()}
        self.engram_history = torch.full((num_state_slots, spec.engram_max_ngram_size - 1), -1,
                                         dtype=torch.int64, device=device)

    def view(self, block_table: torch.Tensor, slot: int, num_tokens: int,
             host_block_table: np.ndarray | None = None) -> PagedSequenceCache:
        """The cache of a sequence holding ``num_tokens`` tokens in ``block_table`` (int64 block
        ids, enough for the tokens of the coming step; copied to the pool's device unless it is
        there already, as the engine's tables are) and state slot ``slot``.
        ``host_block_table``: the same ids on the host (a CPU table is its own), which lets a
        prefill step address every sequence's entries in one op (``append_entries_many``)."""
        if slot <= 0 or slot >= self.num_state_slots:
            raise ValueError(f"state slot {slot} outside 1..{self.num_state_slots - 1}")
        if num_tokens == 0:
            self.engram_history[slot] = -1
        return PagedSequenceCache(self, block_table, slot, num_tokens, host_block_table)

    def flat_window(self) -> torch.Tensor:
        """uint8 (slots * L * W, window_record_bytes) view of every window ring: the record of
        position p of layer l in slot s is row ``(s * L + l) * W + p % W`` (writable)."""
        return self.window.view(-1, self.window.shape[-1])

    def flat_entries(self, source_layer: int) -> torch.Tensor:
        """uint8 (blocks * per_block, compressed_record_bytes) view of a KV source's entries:
        entry e of a sequence is row ``block_table[e // per_block] * per_block + e % per_block``."""
        pool = self.entries[source_layer]
        return pool.view(-1, pool.shape[-1])

    def flat_index_keys(self, source_layer: int) -> torch.Tensor:
        """uint8 (blocks * per_block, index_key_record_bytes) view of a KV source's index keys,
        addressed like :meth:`flat_entries`."""
        pool = self.index_keys[source_layer]
        return pool.view(-1, pool.shape[-1])

    def copy_block(self, src: int, dst: int) -> None:
        """Copy one block of every pool (a fork's partially filled last block)."""
        for pool in (*self.entries.values(), *self.index_keys.values()):
            pool[dst] = pool[src]

    def copy_slot(self, src: int, dst: int) -> None:
        """Copy one state slot of every pool (window, partial group, history of a fork)."""
        for pool in (self.window, *self.partial_kv.values(), *self.partial_gate.values(),
                     self.engram_history):
            pool[dst] = pool[src]

    def block_bytes(self) -> int:
        """Bytes of one block summed over every block pool."""
        return sum(t[0].numel() * t.element_size()
                   for t in (*self.entries.values(), *self.index_keys.values()))

    def state_slot_bytes(self) -> int:
        """Bytes of one state slot summed over every slot pool."""
        return sum(t[0].numel() * t.element_size()
                   for t in (self.window, *self.partial_kv.values(), *self.partial_gate.values(),
                             self.engram_history))


class PagedSequenceCache:
    """One sequence's cache over a :class:`CachePool` (the model's ``CacheView``)."""

    def __init__(self, pool: CachePool, block_table: torch.Tensor, slot: int, num_tokens: int,
                 host_block_table: np.ndarray | None = None):
        self.pool, self.slot, self.num_tokens = pool, slot, num_tokens
        if host_block_table is None and block_table.device.type == "cpu":
            host_block_table = block_table.numpy()
        self.host_block_table = (None if host_block_table is None
                                 else np.asarray(host_block_table, dtype=np.int64))
        self.block_table = block_table.to(device=pool.device, dtype=torch.int64)  # (blocks,)
        self._num_entries = {s: num_tokens // r for s, r in pool.ratio.items()}

    @staticmethod
    def _host_addressed(caches: list) -> bool:
        """Whether every cache is a view of one pool with a host block table."""
        first = caches[0]
        return all(isinstance(c, PagedSequenceCache) and c.pool is first.pool
                   and c.host_block_table is not None for c in caches)

    def _flat_rows(self, source_layer: int, first: int, count: int) -> np.ndarray:
        """Flat pool rows (``CachePool.flat_entries``) of entries first .. first + count - 1."""
        per_block = self.pool.entries_per_block[source_layer]
        ids = np.arange(first, first + count, dtype=np.int64)
        return self.host_block_table[ids // per_block] * per_block + ids % per_block

    def _check_room(self, source_layer: int, last: int) -> None:
        """Raise when entry ``last`` lies beyond the block table (host ints, no device read)."""
        per_block = self.pool.entries_per_block[source_layer]
        if last // per_block >= self.block_table.shape[0]:
            raise RuntimeError(f"sequence in slot {self.slot}: entry {last} of layer "
                               f"{source_layer} needs block {last // per_block} but its table "
                               f"has {self.block_table.shape[0]} blocks")

    @staticmethod
    def window_pool_many(caches: list) -> tuple[torch.Tensor, list[int]] | None:
        """``CachePool.window`` and every cache's state slot (``model/cache.py``
        shared_window), or None unless every cache is a view of one pool."""
        first = caches[0]
        if not all(isinstance(c, PagedSequenceCache) and c.pool is first.pool for c in caches):
            return None
        return first.pool.window, [c.slot for c in caches]

    @staticmethod
    def append_entries_many(caches: list, source_layer: int, entries: torch.Tensor,
                            keys: torch.Tensor, counts: list[int]) -> bool:
        """``append_entries`` of every cache at once (``model/cache.py`` append_entries_all):
        one host-built row list, one copy, two writes. False (nothing done) unless every cache
        is a view of one pool with a host block table."""
        if not PagedSequenceCache._host_addressed(caches):
            return False
        s, rows = source_layer, []
        for cache, n in zip(caches, counts, strict=True):  # every check before any write
            if n:
                cache._check_room(s, cache._num_entries[s] + n - 1)
                rows.append(cache._flat_rows(s, cache._num_entries[s], n))
        if rows:
            pool = caches[0].pool
            flat = to_device(np.concatenate(rows), pool.device)
            pool.flat_entries(s)[flat] = entries
            pool.flat_index_keys(s)[flat] = keys
        for cache, n in zip(caches, counts, strict=True):
            cache._num_entries[s] += n
        return True

    @staticmethod
    def entries_many(caches: list, source_layer: int
                     ) -> tuple[torch.Tensor, list[int]] | None:
        """Every cache's entries of a KV source in one gather (``model/cache.py``
        entries_all), or None unless every cache is a view of one pool with a host table."""
        if not PagedSequenceCache._host_addressed(caches):
            return None
        counts = [c._num_entries[source_layer] for c in caches]
        rows = np.concatenate([c._flat_rows(source_layer, 0, n)
                               for c, n in zip(caches, counts, strict=True)])
        pool = caches[0].pool
        return pool.flat_entries(source_layer)[to_device(rows, pool.device)], counts

    @property
    def engram_history(self) -> torch.Tensor:
        return self.pool.engram_history[self.slot].clone()

    @engram_history.setter
    def engram_history(self, value: torch.Tensor) -> None:
        self.pool.engram_history[self.slot] = value

    def window_ring(self, layer: int) -> torch.Tensor:
        return self.pool.window[self.slot, layer]

    def num_entries(self, source_layer: int) -> int:
        return self._num_entries[source_layer]

    def _gather(self, pools: dict[int, torch.Tensor], s: int) -> torch.Tensor:
        n, per_block = self._num_entries[s], self.pool.entries_per_block[s]
        blocks = self.block_table[:-(-n // per_block)]
        return pools[s][blocks].flatten(0, 1)[:n]

    def entries(self, source_layer: int) -> torch.Tensor:
        return self._gather(self.pool.entries, source_layer)

    def index_key_records(self, source_layer: int) -> torch.Tensor:
        return self._gather(self.pool.index_keys, source_layer)

    def append_entries(self, source_layer: int, entries: torch.Tensor,
                       keys: torch.Tensor) -> None:
        s, per_block = source_layer, self.pool.entries_per_block[source_layer]
        if entries.shape[0] == 0:
            return
        first, last = self._num_entries[s], self._num_entries[s] + entries.shape[0] - 1
        self._check_room(s, last)
        ids = torch.arange(first, last + 1, device=entries.device)
        block_index = torch.div(ids, per_block, rounding_mode="floor")
        blocks, rows = self.block_table[block_index], ids % per_block
        self.pool.entries[s][blocks, rows] = entries
        self.pool.index_keys[s][blocks, rows] = keys
        self._num_entries[s] = first + entries.shape[0]

    def partial(self, source_layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        count = self.num_tokens % self.pool.ratio[source_layer]
        return (self.pool.partial_kv[source_layer][self.slot, :count].clone(),
                self.pool.partial_gate[source_layer][self.slot, :count].clone())

    def set_partial(self, source_layer: int, kv: torch.Tensor, gate: torch.Tensor) -> None:
        count = kv.shape[0]
        self.pool.partial_kv[source_layer][self.slot, :count] = kv
        self.pool.partial_gate[source_layer][self.slot, :count] = gate
