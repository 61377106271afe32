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

The paged, block-allocated form of these caches is the runtime's business; this is the model's
contract for what must persist between chunks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from deepinfer.artifacts.model_spec import ModelSpec


@dataclass
class SequenceCache:
    num_tokens: int
    window: list[torch.Tensor]
    compressed: dict[int, torch.Tensor]
    index_keys: dict[int, torch.Tensor]
    partial_kv: dict[int, torch.Tensor]
    partial_gate: dict[int, torch.Tensor]
    engram_history: torch.Tensor
    sliding_window: int = field(default=0)

    @classmethod
    def empty(cls, spec: ModelSpec) -> SequenceCache:
        """A fresh cache for a sequence that has seen no token."""
        w_bytes = spec.window_record_bytes
        srcs = spec.kv_source_layer_ids
        d = spec.head_dim
        return cls(
            num_tokens=0,
            window=[torch.zeros(spec.sliding_window, w_bytes, dtype=torch.uint8)
                    for _ in range(spec.num_hidden_layers)],
            compressed={s: torch.zeros(0, spec.compressed_record_bytes, dtype=torch.uint8)
                        for s in srcs},
            index_keys={s: torch.zeros(0, spec.index_key_record_bytes, dtype=torch.uint8)
                        for s in srcs},
            partial_kv={s: torch.zeros(0, d) for s in srcs if spec.layers[s].compress_ratio > 1},
            partial_gate={s: torch.zeros(0, d) for s in srcs if spec.layers[s].compress_ratio > 1},
            engram_history=torch.full((spec.engram_max_ngram_size - 1,), -1, dtype=torch.int64),
            sliding_window=spec.sliding_window,
        )

    def num_entries(self, source_layer: int) -> int:
        """Compressed entries (completed groups) of a KV source layer."""
        return self.compressed[source_layer].shape[0]

    def clone(self) -> SequenceCache:
        """A deep copy (a forked sequence continues independently)."""
        return copy.deepcopy(self)

    def nbytes(self) -> int:
        """Bytes held by this cache (window rings + growing entries + partial state)."""
        tensors = (self.window + list(self.compressed.values()) + list(self.index_keys.values())
                   + list(self.partial_kv.values()) + list(self.partial_gate.values()))
        return sum(t.numel() * t.element_size() for t in tensors)
