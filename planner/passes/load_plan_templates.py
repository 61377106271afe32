"""Load-plan templates: the fixed arguments of the runtime's load-plan builder, per cache kind.

Every step the runtime turns each sequence's cache into a list of copy segments
(``deepinfer._C.build_paged_load_plan`` / ``build_ring_load_plan``, ``csrc/include/deepinfer/
load_plan.h``: four int32 per segment, ``-1`` = zero-fill). Only the block table, the token count
and the ring id change per step; everything else is decided here, once, per cache kind:

- ``window``: one ring per layer, ``window`` records held in the sequence's state slot (the
  slot id is the builder's ``ring_block_id``); at most ``MAX_RING_SEGMENTS = 2`` segments (a
  wrapped ring lists its older part, then its newer part).
- ``compressed`` and ``index_keys``: paged, one template per KV-source compress ratio (layers of
  one ratio share the shape): ``entries_per_block = block_size / ratio``; the view is the
  entries of the longest context on one CP rank, ``ceil(ceil(max_len / block) / cp)`` blocks;
  segments at most ``max_paged_segments(view, entries_per_block) = ceil(view / epb) + 1`` (one
  per block, plus one zero-fill), so the runtime can size its pinned segment buffers.

Record bytes say how far to stride in the source block; the segment rows count records.
"""

from __future__ import annotations

from deepinfer.artifacts.model_spec import ModelSpec

__all__ = ["MAX_RING_SEGMENTS", "max_paged_segments", "plan_load_templates"]

MAX_RING_SEGMENTS = 2  # deepinfer::kMaxRingSegments
PAGED_BUILDER = "build_paged_load_plan"
RING_BUILDER = "build_ring_load_plan"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def max_paged_segments(view_len: int, block_size: int) -> int:
    """Mirror of ``deepinfer::max_paged_segments``: one segment per block, plus a zero-fill."""
    return -(-view_len // block_size) + 1


def plan_load_templates(spec: ModelSpec, cache_layout: dict) -> dict:
    """Returns ``{"templates": [{"kind", "layout": "ring" | "paged", "builder", "layers",
    "record_bytes", "compress_ratio", "entries_per_block", "ring_len", "view_len",
    "max_segments_per_seq"}...]}`` (window first, then compressed / index keys by descending
    ratio) and ``"max_segments_per_step_per_seq"``, the sum over templates times their layers.
    Paged templates have ``ring_len`` None; the ring template has ``entries_per_block`` None."""
    block = cache_layout["block_size_tokens"]
    cp = cache_layout["cp"]
    max_len = cache_layout["max_model_len_tokens"]
    window = cache_layout["window_ring_tokens"]
    templates = [{
        "kind": "window", "layout": "ring", "builder": RING_BUILDER,
        "layers": list(cache_layout["window_layers"]),
        "record_bytes": spec.window_record_bytes, "compress_ratio": 0,
        "entries_per_block": None, "ring_len": window, "view_len": window,
        "max_segments_per_seq": MAX_RING_SEGMENTS,
    }]
    by_ratio: dict[int, list[int]] = {}
    for src in cache_layout["kv_sources"]:
        by_ratio.setdefault(src["compress_ratio"], []).append(src["layer"])
    blocks_per_rank = _ceil_div(_ceil_div(max_len, block), cp)
    for ratio in sorted(by_ratio, reverse=True):
        epb = block // ratio
        view = blocks_per_rank * epb
        for kind, record in (("compressed", spec.compressed_record_bytes),
                             ("index_keys", spec.index_key_record_bytes)):
            templates.append({
                "kind": kind, "layout": "paged", "builder": PAGED_BUILDER,
                "layers": sorted(by_ratio[ratio]), "record_bytes": record,
                "compress_ratio": ratio, "entries_per_block": epb, "ring_len": None,
                "view_len": view, "max_segments_per_seq": max_paged_segments(view, epb),
            })
    total = sum(t["max_segments_per_seq"] * len(t["layers"]) for t in templates)
    return {"templates": templates, "max_segments_per_step_per_seq": total}
