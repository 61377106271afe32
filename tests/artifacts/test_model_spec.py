"""ModelSpec: parsing both config layouts, the derived layer schedule, and config errors."""

import copy
import json

import pytest

from deepinfer.artifacts.config_keys import FIELDS
from deepinfer.artifacts.model_spec import (
    ConfigError,
    ModelSpec,
    builtin_config_path,
    load_model_spec,
)


@pytest.fixture(scope="module")
def released_raw() -> dict:
    """The released config.json, shipped verbatim as ``builtin:v41-flash``."""
    return json.loads(builtin_config_path("v41-flash").read_text())


def expected_released_table() -> list[tuple]:
    """model-spec §1.2 written out row by row: (ratio, mode, kv source, index source)."""
    rows = [(0, "window", None, None)] * 2
    for src in (2, 8, 14):
        rows += [(2, "full", src, src)] + [(2, "reuse", src, src)] * 5
    rows += [(1, "full", 20, 20)] + [(1, "reuse", 20, 20)] * 3
    for src in (24, 28, 32, 36):
        rows += [(1, "reindex", 20, src)] + [(1, "reuse", 20, src)] * 3
    rows += [(0, "window", None, None)] * 3  # DSpark stages mtp.0..2
    return rows


def test_released_layer_table_and_kv_bytes(released_raw):
    spec = ModelSpec.from_dict(released_raw)
    got = [(l.compress_ratio, l.mode, l.kv_source, l.index_source) for l in spec.layers]
    assert got == expected_released_table()
    assert [l.layer_id for l in spec.layers if l.is_engram] == [1, 14]
    assert [l.layer_id for l in spec.layers if l.is_dspark] == [40, 41, 42]
    assert [l.layer_id for l in spec.layers if l.is_dspark_tap] == [37, 38, 39]
    assert [l.layer_id for l in spec.layers if l.is_candidate_source] == [20]
    assert [l.layer_id for l in spec.layers if l.candidate_source == 20] == [24, 28, 32, 36]
    assert [l.layer_id for l in spec.layers if l.owns_compressor] == [2, 8, 14, 20]
    assert [l.layer_id for l in spec.layers if l.owns_indexer] == [2, 8, 14, 20, 24, 28, 32, 36]
    assert (spec.window_record_bytes, spec.compressed_record_bytes,
            spec.index_key_record_bytes) == (528, 288, 68)
    assert spec.kv_bytes_per_token == 890
    assert spec.window_bytes_per_sequence == 40 * 128 * 528
    assert spec.has_vision and spec.image_token_id == 129264


def test_tiny_roles():
    spec = load_model_spec("builtin:tiny")
    modes = [l.mode for l in spec.layers]
    assert modes == ["window", "full", "reuse", "reuse", "full", "reuse", "reindex", "reuse",
                     "window", "window"]
    assert spec.layers[6].candidate_source == 4 and spec.layers[4].is_candidate_source
    assert spec.layers[7].index_source == 6 and spec.layers[7].kv_source == 4
    assert [l.layer_id for l in spec.layers if l.is_engram] == [1, 5]
    # layer 1 (ratio 2): (36 + 17) / 2; layer 4 (ratio 1): 36 + 17
    assert spec.kv_bytes_per_token == (36 + 17) / 2 + (36 + 17)


def test_reference_flat_keys_give_the_same_spec(released_raw):
    text = released_raw["text_config"]
    flat = {ref: text[hf] for hf, (ref, _) in FIELDS.items() if ref is not None and hf in text}
    flat["engram_pad_id"] = text["engram_pad_token_id"]
    rs = text["rope_scaling"]
    flat.update(original_seq_len=rs["original_max_position_embeddings"],
                rope_factor=rs["factor"], beta_fast=rs["beta_fast"], beta_slow=rs["beta_slow"],
                max_seq_len=text["max_position_embeddings"], dtype="fp8", expert_dtype="fp4",
                image_token_id=released_raw["image_token_id"], vision_layers=32)
    assert "dim" in flat and "n_layers" in flat and "moe_inter_dim" in flat
    assert ModelSpec.from_dict(flat) == ModelSpec.from_dict(released_raw)


def _broken(raw: dict, **changes) -> dict:
    raw = copy.deepcopy(raw)
    raw["text_config"].update(changes)
    return raw


@pytest.mark.parametrize("changes, field, words", [
    ({"compress_ratios": [0] * 42}, "compress_ratios", "expected 43 entries"),
    ({"kv_source_layer_ids": [2, 8, 14], "candidate_source_layer_id": None}, "compress_ratios",
     "same ratio"),
    ({"kv_source_layer_ids": [8, 14, 20]}, "kv_source_layer_ids", "no KV source"),
    ({"kv_source_layer_ids": [0, 2, 8, 14, 20]}, "kv_source_layer_ids", "ratio > 0"),
    ({"hidden_size": 5000}, "hidden_size", "multiple of 32"),
    ({"index_head_dim": 100}, "index_head_dim", "multiple of 32"),
    ({"qk_rope_head_dim": 63}, "qk_rope_head_dim", "even"),
    ({"num_experts_per_tok": 500}, "num_experts_per_tok", "1..n_routed_experts"),
    ({"candidate_source_layer_id": 24}, "candidate_source_layer_id", "KV source"),
    ({"engram_num_embeddings": [1]}, "engram_num_embeddings", "one entry per engram layer"),
    ({"index_source_layer_ids": [8, 14, 20]}, "index_source_layer_ids", "must also be"),
    ({"hidden_size": "5120"}, "hidden_size", "expected an integer"),
])
def test_inconsistent_configs_name_the_field(released_raw, changes, field, words):
    with pytest.raises(ConfigError) as err:
        ModelSpec.from_dict(_broken(released_raw, **changes), source="cfg.json")
    msg = str(err.value)
    assert "cfg.json" in msg and field in msg and words in msg, msg


def test_missing_required_field(released_raw):
    raw = copy.deepcopy(released_raw)
    del raw["text_config"]["index_topk"]
    with pytest.raises(ConfigError, match=r"text_config\.index_topk'.*missing"):
        ModelSpec.from_dict(raw, source="cfg.json")


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        ModelSpec.from_json_file(tmp_path / "nope.json")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ModelSpec.from_json_file(tmp_path)  # a directory means its config.json
    with pytest.raises(ConfigError, match="unknown built-in"):
        load_model_spec("builtin:huge")
