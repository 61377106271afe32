"""The model section of the plan: resolved ModelSpec fields and the per-layer schedule.

The schedule (model-spec §1.2) is derived once in ``ModelSpec`` and copied here verbatim so the
plan is readable on its own: which layers own a compressor and indexer ("full"), which rescore
another layer's keys ("reindex"), which reuse another layer's top-k ("reuse"), and which are
sliding-window only ("window"). The runtime checks its own schedule against this table.
"""

from __future__ import annotations

import dataclasses

from deepinfer.artifacts.model_spec import LayerSpec, ModelSpec

__all__ = ["plan_model_section"]


def _plain(value: object) -> object:
    """Tuples to lists (JSON has no tuples); other scalars unchanged."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _layer(layer: LayerSpec) -> dict:
    return {
        "index": layer.layer_id,
        "compress_ratio": layer.compress_ratio,
        "attention_mode": layer.mode,
        "kv_source": layer.kv_source,
        "index_source": layer.index_source,
        "candidate_source": layer.candidate_source,
        "is_candidate_source": layer.is_candidate_source,
        "owns_compressor": layer.owns_compressor,
        "owns_index_keys": layer.owns_index_keys,
        "owns_indexer": layer.owns_indexer,
        "is_engram": layer.is_engram,
        "is_dspark_tap": layer.is_dspark_tap,
    }


def plan_model_section(spec: ModelSpec) -> dict:
    """Returns ``{"config": {ModelSpec field: value}, "layers": [backbone layer...],
    "dspark_stages": [stage layer...], "sizes": {...}}``; each layer is ``{"index",
    "compress_ratio", "attention_mode", "kv_source", "index_source", "candidate_source",
    "is_candidate_source", "owns_compressor", "owns_index_keys", "owns_indexer", "is_engram",
    "is_dspark_tap"}`` (a DSpark stage's ``index`` is its layer id, ``num_hidden_layers + k``).
    """
    config = {f.name: _plain(getattr(spec, f.name)) for f in dataclasses.fields(spec)
              if f.name != "layers"}
    stages = spec.layers[spec.num_hidden_layers:]
    return {
        "config": config,
        "layers": [_layer(lay) for lay in spec.backbone_layers],
        "dspark_stages": [dict(_layer(lay), stage=k) for k, lay in enumerate(stages)],
        "sizes": {
            "window_record_bytes": spec.window_record_bytes,
            "compressed_record_bytes": spec.compressed_record_bytes,
            "index_key_record_bytes": spec.index_key_record_bytes,
            "kv_bytes_per_token": spec.kv_bytes_per_token,
        },
    }
