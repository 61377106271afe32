"""plan_model_section: the released layer schedule of model-spec §1.2, JSON-clean and stable."""

import json

import pytest

from deepinfer.artifacts.model_spec import load_model_spec
from deepinfer.planner.passes.model_layers import plan_model_section


@pytest.fixture(scope="module")
def released():
    return plan_model_section(load_model_spec("builtin:v41-flash"))


def test_layer_table_matches_model_spec(released):
    layers = released["layers"]
    assert [lay["index"] for lay in layers] == list(range(40))
    modes = {i: layers[i]["attention_mode"] for i in range(40)}
    assert [i for i, m in modes.items() if m == "window"] == [0, 1]
    assert [i for i, m in modes.items() if m == "full"] == [2, 8, 14, 20]
    assert [i for i, m in modes.items() if m == "reindex"] == [24, 28, 32, 36]
    assert (layers[3]["kv_source"], layers[3]["index_source"]) == (2, 2)
    assert (layers[19]["kv_source"], layers[19]["index_source"]) == (14, 14)
    assert layers[20]["is_candidate_source"] and layers[20]["compress_ratio"] == 1
    assert (layers[24]["kv_source"], layers[24]["index_source"],
            layers[24]["candidate_source"]) == (20, 24, 20)
    assert (layers[25]["kv_source"], layers[25]["index_source"]) == (20, 24)
    assert layers[0]["kv_source"] is None and layers[0]["index_source"] is None
    assert [i for i in range(40) if layers[i]["is_engram"]] == [1, 14]
    assert [i for i in range(40) if layers[i]["is_dspark_tap"]] == [37, 38, 39]
    assert [lay["compress_ratio"] for lay in layers] == [0, 0] + [2] * 18 + [1] * 20


def test_dspark_stages(released):
    stages = released["dspark_stages"]
    assert [(s["index"], s["stage"], s["attention_mode"]) for s in stages] == [
        (40, 0, "window"), (41, 1, "window"), (42, 2, "window")]


def test_config_and_sizes(released):
    cfg = released["config"]
    assert cfg["vocab_size"] == 129280 and cfg["hidden_size"] == 5120
    assert cfg["compress_ratios"] == [0, 0] + [2] * 18 + [1] * 20 + [0, 0, 0]
    assert cfg["weight_block_size"] == [32, 32]
    assert "layers" not in cfg
    assert released["sizes"] == {"window_record_bytes": 528, "compressed_record_bytes": 288,
                                 "index_key_record_bytes": 68, "kv_bytes_per_token": 890.0}


def test_json_clean_and_deterministic(released):
    assert json.loads(json.dumps(released)) == released
    assert plan_model_section(load_model_spec("builtin:v41-flash")) == released


def test_tiny_schedule():
    tiny = plan_model_section(load_model_spec("builtin:tiny"))
    assert [lay["attention_mode"] for lay in tiny["layers"]] == [
        "window", "full", "reuse", "reuse", "full", "reuse", "reindex", "reuse"]
    assert len(tiny["dspark_stages"]) == 2
