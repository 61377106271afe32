"""topology.yaml parsing: defaults, units, the hardware table, path resolution, the built-in
topologies, and one TopologyError per kind of mistake (file, dotted field, allowed values)."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from deepinfer.artifacts.model_spec import (
    MODE_FULL,
    MODE_REINDEX,
    MODE_REUSE,
    MODE_WINDOW,
    ModelSpec,
    builtin_config_path,
)
from deepinfer.planner.errors import TopologyError
from deepinfer.planner.hardware import GIB, HARDWARE
from deepinfer.planner.topology import SchedulerSection
from deepinfer.planner.topology_schema import (
    builtin_topology_names,
    load_topology,
    model_config_path,
    parse_topology,
    yaml_field,
)

TINY = {"model": {"path": "builtin:tiny"}}


def write(tmp_path: Path, doc, name: str = "topology.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def error_of(doc, tmp_path: Path) -> TopologyError:
    path = write(tmp_path, doc)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert info.value.source == str(path)
    return info.value


def test_minimal_topology_takes_defaults():
    topo = parse_topology(TINY)
    assert topo.model.path == "builtin:tiny" and topo.model.weights == "auto"
    assert topo.scheduler == SchedulerSection()
    assert topo.hardware.device == "cpu"
    assert topo.hardware.memory_bytes == 16 * GIB  # fixed planning value, not this machine
    assert (topo.parallel.dp, topo.parallel.ep, topo.hardware.gpus_per_node) == (1, 1, 1)


def test_units_are_converted_and_explicit_numbers_override_the_table():
    topo = parse_topology({**TINY, "hardware": {"device": "h200", "gpus_per_node": 8,
                                                "memory_gib": 100, "hbm_tb_per_s": 4},
                           "cache": {"block_size": 32, "max_model_len": 8192},
                           "scheduler": {"prefill_chunk_size": 1024}})
    hw = topo.hardware
    assert hw.memory_bytes == 100 * GIB and hw.hbm_bytes_per_s == 4e12
    assert hw.bf16_flops_per_s == HARDWARE["h200"].bf16_flops_per_s and hw.sm_arch == 90
    assert topo.cache.block_size_tokens == 32 and topo.cache.max_model_len_tokens == 8192
    assert topo.scheduler.prefill_chunk_size_tokens == 1024
    # dp and ep default to every device.
    assert (topo.parallel.dp, topo.parallel.ep, topo.world_size) == (8, 8, 8)


def test_hardware_table_planning_numbers():
    h200 = HARDWARE["h200"]
    assert h200.nominal_memory_bytes == 141 * 10**9 and h200.memory_bytes == 139 * GIB
    assert (h200.hbm_bytes_per_s, h200.bf16_flops_per_s, h200.fp8_flops_per_s) == (
        4.8e12, 989e12, 1979e12)
    assert HARDWARE["b200"].sm_arch == 100 and HARDWARE["h20"].bf16_flops_per_s == 148e12


def test_custom_device_needs_every_number(tmp_path):
    err = error_of({**TINY, "hardware": {"device": "custom", "memory_gib": 10}}, tmp_path)
    assert err.field == "hardware.hbm_tb_per_s" and "bf16_tflops" in err.message
    topo = parse_topology({**TINY, "hardware": {
        "device": "custom", "memory_gib": 10, "hbm_tb_per_s": 1, "bf16_tflops": 100,
        "fp8_tflops": 200, "sm_arch": 90}})
    assert topo.hardware.fp8_flops_per_s == 200e12 and topo.hardware.sm_arch == 90


def test_relative_paths_resolve_against_the_yaml_directory(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shutil.copy(builtin_config_path("tiny"), ckpt / "config.json")
    (tmp_path / "stats.json").write_text("{}")
    sub = tmp_path / "sub"
    sub.mkdir()
    path = write(sub, {"model": {"path": "../ckpt"}, "eplb": {"load_stats": "../stats.json"}})
    topo = load_topology(path)
    assert topo.model.path == str(ckpt.resolve())
    assert topo.eplb.load_stats == str((tmp_path / "stats.json").resolve())
    assert model_config_path(topo.model.path) == ckpt.resolve() / "config.json"
    assert topo.base_dir == str(sub.resolve()) and topo.source == str(path)


@pytest.mark.parametrize("name", builtin_topology_names())
def test_builtin_topologies_parse(name):
    topo = load_topology(f"builtin:{name}")
    assert topo.source == f"builtin:{name}"
    assert model_config_path(topo.model.path).is_file()


def test_builtin_names_and_default():
    assert set(builtin_topology_names()) >= {"tiny-cpu", "tiny-cpu-dp2-ep2", "v41-flash-h200x8",
                                             "v41-flash-2x8-h200", "v41-flash-slice-h200"}
    assert load_topology().source == "builtin:tiny-cpu"
    dp2 = load_topology("builtin:tiny-cpu-dp2-ep2")
    assert (dp2.parallel.dp, dp2.parallel.ep, dp2.hardware.device) == (2, 2, "cpu")
    two_nodes = load_topology("builtin:v41-flash-2x8-h200")
    assert (two_nodes.hardware.nodes, two_nodes.world_size) == (2, 16)


def test_slice_config_covers_every_layer_kind():
    topo = load_topology("builtin:v41-flash-slice-h200")
    spec = ModelSpec.from_json_file(model_config_path(topo.model.path))
    released = ModelSpec.from_json_file(builtin_config_path("v41-flash"))
    for name in ("hidden_size", "num_attention_heads", "head_dim", "n_routed_experts",
                 "moe_intermediate_size", "q_lora_rank", "o_lora_rank", "index_n_heads"):
        assert getattr(spec, name) == getattr(released, name), name
    kinds = [(lay.compress_ratio, lay.mode, lay.is_engram, lay.is_candidate_source,
              lay.candidate_source is not None) for lay in spec.backbone_layers]
    assert kinds == [
        (0, MODE_WINDOW, False, False, False),  # window only
        (0, MODE_WINDOW, True, False, False),  # engram
        (2, MODE_FULL, False, False, False),  # Full ratio 2
        (2, MODE_REUSE, False, False, False),  # Reuse ratio 2
        (1, MODE_FULL, False, True, False),  # Full ratio 1, candidate source
        (1, MODE_REUSE, False, False, False),  # Reuse ratio 1
        (1, MODE_REINDEX, False, False, True),  # Reindex with candidates
        (1, MODE_REUSE, False, False, False),  # Reuse ratio 1 of the Reindex top-k
    ]
    assert spec.backbone_layers[7].index_source == 6


@pytest.mark.parametrize("doc, field, expect", [
    ({**TINY, "cache": {"blocksize": 16}}, "cache.blocksize", "did you mean 'block_size'"),
    ({**TINY, "modle": {}}, "modle", "allowed keys: model, hardware"),
    ({**TINY, "cache": {"block_size": "16"}}, "cache.block_size", "expected an integer"),
    ({**TINY, "cache": {"block_size": True}}, "cache.block_size", "(bool)"),
    ({**TINY, "scheduler": {"max_num_seqs": 2.0}}, "scheduler.max_num_seqs", "integer"),
    ({**TINY, "cache": {"block_size": 0}}, "cache.block_size", ">= 1, got 0"),
    ({**TINY, "parallel": {"dp": -2}}, "parallel.dp", ">= 1, got -2"),
    ({**TINY, "hardware": {"memory_gib": 0}}, "hardware.memory_gib", "> 0"),
    ({**TINY, "hardware": {"memory_gib": float("inf")}}, "hardware.memory_gib", "finite"),
    ({**TINY, "cache": {"memory_fraction": 1.5}}, "cache.memory_fraction", "<= 1"),
    ({**TINY, "hardware": {"device": "h300"}}, "hardware.device", "cpu, h100, h200, h20, b200"),
    ({**TINY, "scheduler": {"mode": "fast"}}, "scheduler.mode", "normal, prompt, completion"),
    ({**TINY, "speculative": {"method": "eagle"}}, "speculative.method", "none, dspark"),
    ({**TINY, "model": {"path": "builtin:tiny", "weights": "random"}}, "model.weights",
     "auto, synthetic"),
    ({"model": {"path": "builtin:huge"}}, "model.path", "builtin:tiny, builtin:v41-flash"),
    ({"model": {"weights": "auto"}}, "model.path", "missing"),
    ({"hardware": {}}, "model", "missing"),
    ({**TINY, "cache": [16]}, "cache", "expected a mapping"),
    ({**TINY, "parallel": {"dp": 2, "ep": 3}}, "parallel.ep", "allowed: 1, 2"),
    ({**TINY, "parallel": {"dp": 2}, "hardware": {"gpus_per_node": 4}}, "parallel.dp",
     "= 4 devices"),
    ({**TINY, "hardware": {"nodes": 2}}, "hardware.nodes", "dp * cp = 1"),
    ({**TINY, "scheduler": {"prefill_chunk_size": 9000}}, "scheduler.prefill_chunk_size",
     "max_num_batched_tokens (8192)"),
    ({**TINY, "speculative": {"num_draft_tokens": 2}}, "speculative.num_draft_tokens",
     "method 'none'"),
    ({**TINY, "eplb": {"load_stats": "missing.json"}}, "eplb.load_stats", "file not found"),
    ({**TINY, "cache": {"max_model_len": 100}}, "workload.prompt_len", "max_model_len = 100"),
    ({**TINY, "cache": {"prefill_bf16_weights": "yes"}}, "cache.prefill_bf16_weights",
     "auto, on, off"),
    ({**TINY, "cache": {"prefill_bf16_weights": 1}}, "cache.prefill_bf16_weights", "(int)"),
])
def test_field_errors(tmp_path, doc, field, expect):
    err = error_of(doc, tmp_path)
    assert err.field == field
    assert expect in err.message, err.message
    assert str(err).startswith(f"{err.source}: {field}: ")


def test_model_path_errors(tmp_path):
    err = error_of({"model": {"path": "no/such/dir"}}, tmp_path)
    assert err.field == "model.path" and "not found" in err.message
    (tmp_path / "empty").mkdir()
    err = error_of({"model": {"path": "empty"}}, tmp_path)
    assert err.field == "model.path" and "no config.json" in err.message


def test_file_level_errors(tmp_path):
    assert "duplicate key 'cache'" in error_of(
        "model: {path: builtin:tiny}\ncache: {}\ncache: {}\n", tmp_path).message
    err = error_of("model: {path: builtin:tiny\n", tmp_path)
    assert err.field == "" and "not valid YAML: line" in err.message
    assert "top level" in error_of("- model\n", tmp_path).message
    with pytest.raises(TopologyError, match="file not found"):
        load_topology(tmp_path / "absent.yaml")
    with pytest.raises(TopologyError, match="builtin:tiny-cpu"):
        load_topology("builtin:nope")


def test_yaml_field_maps_dataclass_fields_to_yaml_keys():
    assert yaml_field("hardware.memory_bytes") == "hardware.memory_gib"
    assert yaml_field("cache.block_size_tokens") == "cache.block_size"
    assert yaml_field("parallel.ep") == "parallel.ep"
    assert yaml_field("load") == "load"


def test_config_json_is_a_valid_json_file_for_the_slice():
    # the slice's config ships beside the topologies (package data)
    path = model_config_path("builtin:v41-flash-slice")
    assert json.loads(path.read_text())["text_config"]["num_hidden_layers"] == 8


@pytest.mark.parametrize("name", ["tiny-cpu", "v41-flash-h200x8"])
def test_topology_round_trips_through_the_plan_record(name):
    import dataclasses

    from deepinfer.planner.topology import Topology

    topo = load_topology(f"builtin:{name}")
    assert Topology.from_dict(dataclasses.asdict(topo)) == topo


def test_on_and_off_read_as_yaml_booleans():
    """A bare ``on`` / ``off`` in YAML 1.1 is a boolean: the on / off switches take it as
    written."""
    import yaml

    for text, want in (("on", "on"), ("off", "off"), ("auto", "auto"), ("'on'", "on")):
        raw = yaml.safe_load(f"model: {{path: 'builtin:tiny'}}\ncache:\n  prefill_bf16_weights: "
                             f"{text}\n")
        assert parse_topology(raw).cache.prefill_bf16_weights == want
