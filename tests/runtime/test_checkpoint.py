"""Checkpoint name table, synthetic writer, validating reader and CLI (model-spec §4, §5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from deepinfer.artifacts.model_spec import ModelSpec, builtin_config_path, load_model_spec
from deepinfer.kernels.formats import dequantize_fp4_weight, dequantize_fp8_weight
from deepinfer.runtime.weights import (
    CheckpointError,
    TensorSpec,
    estimated_checkpoint_bytes,
    expected_tensors,
    is_skipped_name,
    read_checkpoint,
    synthetic_checkpoint_tensors,
    synthetic_weights,
    validate_checkpoint,
    write_checkpoint,
)
from deepinfer.runtime.weights import shards as shards_module
from deepinfer.runtime.weights.cli import main as cli_main
from deepinfer.runtime.weights.shards import INDEX_FILE
from deepinfer.runtime.weights.synthetic import tensor_seed

# ---------------------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> ModelSpec:
    return load_model_spec("builtin:tiny")


@pytest.fixture(scope="module")
def released() -> ModelSpec:
    return load_model_spec("builtin:v41-flash")


@pytest.fixture(scope="module")
def released_table(released: ModelSpec) -> dict[str, TensorSpec]:
    return expected_tensors(released)  # ~96k names: build it once


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model written once with seed 0 (never modified; copy it to mutate)."""
    return write_checkpoint("builtin:tiny", tmp_path_factory.mktemp("ckpt") / "tiny", seed=0)


@pytest.fixture
def no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any tensor data is read (shards.load_tensors is the only data reader)."""

    def forbidden(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
        raise AssertionError(f"tensor data of {path.name} was read before validation failed")

    monkeypatch.setattr(shards_module, "load_tensors", forbidden)


def _copy(ckpt: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(ckpt, tmp_path / "ckpt"))


def _index(ckpt: Path) -> dict:
    return json.loads((ckpt / INDEX_FILE).read_text())


def _edit_shard_of(ckpt: Path, name: str, new: torch.Tensor | None, add: bool = False) -> str:
    """Replace (or delete, when ``new`` is None) tensor ``name`` in its shard; with ``add``, put
    the new tensor ``name`` into the first shard. Keeps the index in step. Returns the shard."""
    index = _index(ckpt)
    shard = sorted(set(index["weight_map"].values()))[0] if add else index["weight_map"][name]
    tensors = load_file(str(ckpt / shard))
    if new is None:
        del tensors[name]
        del index["weight_map"][name]
    else:
        tensors[name] = new
        index["weight_map"][name] = shard
    save_file(tensors, str(ckpt / shard))
    (ckpt / INDEX_FILE).write_text(json.dumps(index))
    return shard


def _bytes_of(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def _read_failure(ckpt: Path, spec: ModelSpec) -> str:
    """The message of the CheckpointError that reading ``ckpt`` raises (validate agrees)."""
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(ckpt, spec)
    assert validate_checkpoint(ckpt, spec) == info.value.problems
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# Name table
# ---------------------------------------------------------------------------------------------


def test_released_spot_shapes_match_spec(released_table: dict[str, TensorSpec]) -> None:
    table = released_table
    f8, e8, i8 = torch.float8_e4m3fn, torch.float8_e8m0fnu, torch.int8
    spots = {
        "layers.0.attn.wq_a.weight": (f8, (1280, 5120), "fp8"),
        "layers.0.attn.wq_a.scale": (e8, (40, 160), "fp8_scale"),
        "layers.0.attn.wq_b.weight": (f8, (32768, 1280), "fp8"),
        "layers.0.attn.wq_b.scale": (e8, (1024, 40), "fp8_scale"),
        "layers.0.attn.wkv.scale": (e8, (16, 160), "fp8_scale"),
        "layers.0.attn.wo_a.weight": (f8, (8192, 4096), "fp8"),
        "layers.0.attn.wo_a.scale": (e8, (256, 128), "fp8_scale"),
        "layers.0.attn.wo_b.scale": (e8, (160, 256), "fp8_scale"),
        "layers.0.attn.attn_sink": (torch.float32, (64,), "f32"),
        "layers.0.hc_attn_fn": (torch.float32, (24, 20480), "f32"),
        "layers.0.ffn.gate.bias_vl": (torch.float32, (384,), "f32"),
        "layers.0.ffn.shared_experts.w1.scale": (e8, (72, 160), "fp8_scale"),
        "layers.0.ffn.shared_experts.w2.scale": (e8, (160, 72), "fp8_scale"),
        "layers.7.ffn.experts.383.w1.weight": (i8, (2304, 2560), "fp4"),
        "layers.7.ffn.experts.383.w1.scale": (e8, (2304, 160), "fp4_scale"),
        "layers.7.ffn.experts.0.w2.weight": (i8, (5120, 1152), "fp4"),
        "layers.7.ffn.experts.0.w2.scale": (e8, (5120, 72), "fp4_scale"),
        "layers.1.engram.embed.weight": (f8, (384006168, 256), "fp8_rows"),
        "layers.1.engram.embed.scale": (e8, (384006168, 8), "fp8_rows_scale"),
        "layers.14.engram.embed.weight": (f8, (384016682, 256), "fp8_rows"),
        "layers.1.engram.wkv.weight": (f8, (25600, 6144), "fp8"),
        "layers.1.engram.wkv.scale": (e8, (800, 192), "fp8_scale"),
        "layers.14.engram.q_weight": (torch.float32, (4, 5120), "f32"),
        "layers.20.attn.indexer.wq_b.scale": (e8, (128, 40), "fp8_scale"),
        "layers.20.attn.indexer.wk.weight": (torch.bfloat16, (128, 512), "bf16"),
        "embed.weight": (torch.bfloat16, (129280, 5120), "bf16"),
        "image_newline": (torch.bfloat16, (5120,), "bf16"),
        "mtp.0.main_proj.weight": (f8, (5120, 15360), "fp8"),
        "mtp.2.markov_head.head.weight": (torch.bfloat16, (129280, 256), "bf16"),
        "mtp.2.confidence_head.proj.weight": (torch.bfloat16, (1, 5376), "bf16"),
        "mtp.1.ffn.experts.127.w3.weight": (i8, (2304, 2560), "fp4"),
    }
    for name, (dtype, shape, kind) in spots.items():
        t = table[name]
        assert (t.dtype, t.shape, t.kind) == (dtype, shape, kind), name
    assert "mtp.1.ffn.experts.128.w1.weight" not in table
    assert not table["image_start"].is_backbone and not table["mtp.0.attn.wkv.weight"].is_backbone
    assert table["layers.39.ffn.experts.383.w2.scale"].is_backbone
    # ~474 GiB on disk without the vision tower (the release is 476 GiB with it).
    assert 470 * 2**30 < sum(t.num_bytes for t in table.values()) < 476 * 2**30


def test_released_layer_roles(released_table: dict[str, TensorSpec]) -> None:
    table = released_table

    def attn_names(prefix: str) -> set[str]:
        return {n[len(prefix):] for n in table if n.startswith(prefix)}

    reuse, window = attn_names("layers.3.attn."), attn_names("layers.0.attn.")
    assert reuse == window
    added = attn_names("layers.24.attn.") - window
    assert added == {"indexer.wq_b.weight", "indexer.wq_b.scale", "indexer.weights_proj.weight"}
    assert attn_names("layers.2.attn.") - window == added | {
        "compressor.wkv.weight", "compressor.wgate.weight", "compressor.norm.weight",
        "indexer.wk.weight", "indexer.k_norm.weight"}
    assert attn_names("layers.20.attn.") - attn_names("layers.2.attn.") == set()
    assert "compressor.wgate.weight" not in attn_names("layers.20.attn.")
    layer_of = {n: int(n.split(".")[1]) for n in table if n.startswith("layers.")}
    assert sorted(layer_of[n] for n in table if n.endswith("compressor.wgate.weight")) == [2, 8, 14]
    assert sorted(layer_of[n] for n in table if n.endswith("indexer.wk.weight")) == [2, 8, 14, 20]
    assert sorted(layer_of[n] for n in table if n.endswith("weights_proj.weight")) == [
        2, 8, 14, 20, 24, 28, 32, 36]
    assert sorted(layer_of[n] for n in table if n.endswith("engram.wkv.weight")) == [1, 14]
    assert attn_names("mtp.1.attn.") == window  # DSpark stages are ratio-0 blocks
    assert {n for n in table if n.startswith("mtp.") and n.endswith("experts.0.w1.weight")} == {
        f"mtp.{k}.ffn.experts.0.w1.weight" for k in range(3)}
    assert not any(n.startswith("model.") for n in table)


def test_tiny_table(tiny: ModelSpec) -> None:
    table = expected_tensors(tiny)
    assert table["layers.1.engram.embed.weight"].shape == (660, 32)
    assert table["layers.5.engram.embed.scale"].shape == (864, 1)
    assert table["layers.5.engram.wkv.weight"].shape == (256 * 5, 3 * 2 * 32)
    assert table["layers.5.engram.k_weight"].shape == (4, 256)
    assert table["layers.0.attn.wo_a.weight"].shape == (64, 128)
    assert table["layers.0.attn.wo_b.weight"].shape == (256, 64)
    assert table["mtp.0.main_proj.weight"].shape == (256, 768)
    assert table["mtp.1.confidence_head.proj.weight"].shape == (1, 256 + 32)
    assert "mtp.0.markov_head.embed.weight" not in table and "mtp.1.main_proj.weight" not in table
    gates = {n for n in table if "compressor.wgate" in n}
    assert gates == {"layers.1.attn.compressor.wgate.weight"}
    assert not any(n.startswith("image_") for n in table)  # the tiny config has no vision tower
    assert not any(n.startswith("mtp.") for n in expected_tensors(tiny, include_dspark=False))
    assert all(t.is_backbone == (not n.startswith("mtp.")) for n, t in table.items())


def test_is_skipped_name() -> None:
    for name in ("vision.blocks.0.attn.qkv.weight", "aligner.proj.weight", "mtp.0.main_norm.weight",
                 "image_start", "image_end", "image_newline.weight"):
        assert is_skipped_name(name), name
    for name in ("embed.weight", "layers.0.attn.wq_a.weight", "head.weight", "visionary"):
        assert not is_skipped_name(name), name


# ---------------------------------------------------------------------------------------------
# Synthetic tensors
# ---------------------------------------------------------------------------------------------


def test_synthetic_matches_table_and_value_ranges(tiny: ModelSpec) -> None:
    tensors = synthetic_checkpoint_tensors(tiny, seed=0)
    table = expected_tensors(tiny)
    assert list(tensors) == list(table)
    for name, t in table.items():
        assert (tensors[name].dtype, tuple(tensors[name].shape)) == (t.dtype, t.shape), name
    f = {n: tensors[n].float() for n in ("layers.0.attn_norm.weight", "layers.1.hc_ffn_scale",
                                         "layers.1.engram.q_weight", "layers.2.ffn.gate.bias")}
    assert abs(f["layers.0.attn_norm.weight"].mean() - 1) < 0.03
    assert (f["layers.1.hc_ffn_scale"] - 0.5).abs().max() < 0.1
    assert abs(f["layers.1.engram.q_weight"].mean() - 1) < 0.03
    assert f["layers.2.ffn.gate.bias"].abs().max() < 0.1
    assert not torch.equal(tensors["layers.2.ffn.gate.bias"], tensors["layers.2.ffn.gate.bias_vl"])
    wq = dequantize_fp8_weight(tensors["layers.0.attn.wq_a.weight"],
                               tensors["layers.0.attn.wq_a.scale"])
    assert 0.015 < wq.std() < 0.025


def test_synthetic_refuses_real_model(released: ModelSpec) -> None:
    with pytest.raises(ValueError, match=r"refusing to synthesize model \(hidden_size 5120, 40 "):
        synthetic_checkpoint_tensors(released)


def test_synthetic_refuses_big_model() -> None:
    raw = json.loads(builtin_config_path("tiny").read_text())
    raw["text_config"]["vocab_size"] = 3_000_000  # embed + head alone: 2 x 1.4 GiB
    big = ModelSpec.from_dict(raw)
    assert estimated_checkpoint_bytes(big) > 2 << 30
    with pytest.raises(ValueError, match="refusing to synthesize .* vocab 3000000"):
        synthetic_weights(big)


def test_tensor_seed_is_stable() -> None:
    assert tensor_seed(0, "embed.weight") == tensor_seed(0, "embed.weight")
    assert tensor_seed(0, "embed.weight") != tensor_seed(1, "embed.weight")
    assert tensor_seed(0, "embed.weight") == 2624587714291622697  # independent of PYTHONHASHSEED


def test_dequantization_is_exact_in_bf16() -> None:
    # Every finite e4m3 code times every scale 2^-124..2^119 (bytes 3..246) survives bf16.
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
    codes = codes[~codes.float().isnan()]
    scale_bytes = torch.arange(3, 247, dtype=torch.uint8)
    weight = codes.repeat(32 * len(scale_bytes), 1)  # [32*S, C]: one row tile per scale
    cols = -(-weight.shape[1] // 32)
    scale = scale_bytes[:, None].expand(-1, cols).contiguous().view(torch.float8_e8m0fnu)
    values = dequantize_fp8_weight(weight, scale)
    assert torch.equal(values.to(torch.bfloat16).float(), values)
    # Every e2m1 nibble pair times the same scales.
    packed = torch.arange(256, dtype=torch.uint8).view(torch.int8).repeat(len(scale_bytes), 1)
    scale4 = scale_bytes[:, None].expand(-1, 512 // 32).contiguous().view(torch.float8_e8m0fnu)
    values4 = dequantize_fp4_weight(packed, scale4)
    assert torch.equal(values4.to(torch.bfloat16).float(), values4)


# ---------------------------------------------------------------------------------------------
# Writer and reader round trip
# ---------------------------------------------------------------------------------------------


def test_written_layout(tiny_ckpt: Path, tiny: ModelSpec) -> None:
    index = _index(tiny_ckpt)
    shard_files = sorted(p.name for p in tiny_ckpt.glob("*.safetensors"))
    assert len(shard_files) >= 3
    assert shard_files[0] == f"model-00001-of-{len(shard_files):05d}.safetensors"
    assert sorted(set(index["weight_map"].values())) == shard_files
    assert set(index["weight_map"]) == set(expected_tensors(tiny))
    stored = synthetic_checkpoint_tensors(tiny, seed=0)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size()
                                                  for t in stored.values())
    for name in stored:  # a quantized weight and its scale share a shard
        if name.endswith(".scale"):
            weight = name.removesuffix(".scale") + ".weight"
            assert index["weight_map"][name] == index["weight_map"][weight]
    assert (tiny_ckpt / "config.json").read_bytes() == builtin_config_path("tiny").read_bytes()
    assert [p.name for p in tiny_ckpt.parent.iterdir()] == ["tiny"]  # no temporary left behind


def test_written_tensors_are_bitwise_the_synthetic_ones(tiny_ckpt: Path, tiny: ModelSpec) -> None:
    stored = synthetic_checkpoint_tensors(tiny, seed=0)
    on_disk: dict[str, torch.Tensor] = {}
    for shard in tiny_ckpt.glob("*.safetensors"):
        on_disk.update(load_file(str(shard)))
    assert on_disk.keys() == stored.keys()
    for name, t in stored.items():
        assert on_disk[name].dtype == t.dtype and _bytes_of(on_disk[name]) == _bytes_of(t), name


@pytest.mark.parametrize("include_dspark", [False, True])
def test_read_equals_in_memory_synthetic(tiny_ckpt: Path, tiny: ModelSpec,
                                         include_dspark: bool) -> None:
    from_file = read_checkpoint(tiny_ckpt, tiny, include_dspark=include_dspark)
    in_memory = synthetic_weights(tiny, seed=0, include_dspark=include_dspark)
    assert list(from_file) == list(in_memory)
    for name, t in in_memory.items():
        assert from_file[name].dtype == t.dtype and torch.equal(from_file[name], t), name
    table = expected_tensors(tiny)
    assert not any(name.endswith(".scale") for name in from_file)
    assert any(name.startswith("mtp.") for name in from_file) == include_dspark
    for name, t in from_file.items():
        spec = table[name]
        assert tuple(t.shape) == spec.logical_shape, name
        want = torch.bfloat16 if spec.kind in ("fp8", "fp4", "fp8_rows") else spec.dtype
        assert t.dtype == want, name
    assert from_file["layers.0.ffn.experts.3.w2.weight"].shape == (256, 64)


def test_loader_hook_is_the_data_path(tiny_ckpt: Path, tiny: ModelSpec,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Control for the failure tests: on a good checkpoint the patched loader IS called."""
    calls: list[str] = []
    real = shards_module.load_tensors

    def recording(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
        calls.append(path.name)
        return real(path, names)

    monkeypatch.setattr(shards_module, "load_tensors", recording)
    assert validate_checkpoint(tiny_ckpt, tiny) == [] and calls == []
    read_checkpoint(tiny_ckpt, tiny)
    assert calls


def test_determinism(tiny_ckpt: Path, tmp_path: Path) -> None:
    (tmp_path / "again").mkdir()  # an existing empty directory is fine
    again = write_checkpoint(builtin_config_path("tiny"), tmp_path / "again", seed=0)
    for f in sorted(tiny_ckpt.iterdir()):
        assert (again / f.name).read_bytes() == f.read_bytes(), f.name
    other = synthetic_checkpoint_tensors(load_model_spec("builtin:tiny"), seed=1)
    first = load_file(str(tiny_ckpt / "model-00001-of-00004.safetensors"))
    # 32x32-tile scales of N(0, 0.02) weights often coincide across seeds; the values never do.
    assert all(_bytes_of(t) != _bytes_of(other[n]) for n, t in first.items()
               if not n.endswith(".scale"))


def test_writer_refuses_non_empty_dir(tiny_ckpt: Path, tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not an empty directory; refusing to overwrite"):
        write_checkpoint("builtin:tiny", target)
    assert [p.name for p in tmp_path.iterdir()] == ["busy"]
    assert [p.name for p in target.iterdir()] == ["keep.txt"]


# ---------------------------------------------------------------------------------------------
# Failure modes: each reported by name, before any tensor data is read
# ---------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_loading")
def test_missing_tensor(tiny_ckpt: Path, tiny: ModelSpec, tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    _edit_shard_of(ckpt, "layers.3.attn.wq_b.scale", None)
    message = _read_failure(ckpt, tiny)
    assert "missing tensor layers.3.attn.wq_b.scale (expected F8_E8M0 [8, 2])" in message


@pytest.mark.usefixtures("no_loading")
def test_wrong_shape(tiny_ckpt: Path, tiny: ModelSpec, tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    bad = torch.ones(65, dtype=torch.bfloat16)
    shard = _edit_shard_of(ckpt, "layers.2.attn.q_norm.weight", bad)
    message = _read_failure(ckpt, tiny)
    assert f"tensor layers.2.attn.q_norm.weight: shape [65] in {shard}, expected [64]" in message


@pytest.mark.usefixtures("no_loading")
def test_wrong_dtype(tiny_ckpt: Path, tiny: ModelSpec, tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    shard = _edit_shard_of(ckpt, "layers.0.ffn.gate.bias", torch.zeros(8, dtype=torch.bfloat16))
    message = _read_failure(ckpt, tiny)
    assert f"tensor layers.0.ffn.gate.bias: dtype BF16 in {shard}, expected F32" in message


@pytest.mark.usefixtures("no_loading")
def test_truncated_shard(tiny_ckpt: Path, tiny: ModelSpec, tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    shard = ckpt / "model-00002-of-00004.safetensors"
    with shard.open("r+b") as f:
        f.truncate(shard.stat().st_size - 100)
    message = _read_failure(ckpt, tiny)
    assert "shard model-00002-of-00004.safetensors: truncated" in message


@pytest.mark.usefixtures("no_loading")
def test_missing_index(tiny_ckpt: Path, tiny: ModelSpec, tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    (ckpt / INDEX_FILE).unlink()
    message = _read_failure(ckpt, tiny)
    assert f"{ckpt / INDEX_FILE}: missing checkpoint index" in message
    (ckpt / INDEX_FILE).write_text("{not json")
    assert "unreadable checkpoint index" in _read_failure(ckpt, tiny)


@pytest.mark.usefixtures("no_loading")
def test_unexpected_tensor(tiny_ckpt: Path, tiny: ModelSpec, tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    _edit_shard_of(ckpt, "layers.0.attn.bogus.weight", torch.zeros(4), add=True)
    for skipped in ("vision.blocks.0.w", "aligner.proj.weight", "image_start", "mtp.7.extra"):
        _edit_shard_of(ckpt, skipped, torch.zeros(4), add=True)
    problems = validate_checkpoint(ckpt, tiny)
    assert len(problems) == 1 and "unexpected tensor layers.0.attn.bogus.weight" in problems[0]
    _read_failure(ckpt, tiny)
    # With DSpark included, mtp.* names are checked, so the stray one is reported too.
    dspark_problems = validate_checkpoint(ckpt, tiny, include_dspark=True)
    assert any("unexpected tensor mtp.7.extra" in p for p in dspark_problems)


@pytest.mark.usefixtures("no_loading")
def test_index_pointing_to_missing_shard_or_tensor(tiny_ckpt: Path, tiny: ModelSpec,
                                                   tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    index = _index(ckpt)
    index["weight_map"]["layers.0.attn.wkv.weight"] = "model-00009-of-00009.safetensors"
    wrong = "model-00004-of-00004.safetensors"
    assert index["weight_map"]["layers.1.attn.wkv.weight"] != wrong
    index["weight_map"]["layers.1.attn.wkv.weight"] = wrong
    (ckpt / INDEX_FILE).write_text(json.dumps(index))
    message = _read_failure(ckpt, tiny)
    assert ("shard model-00009-of-00009.safetensors does not exist" in message
            and "layers.0.attn.wkv.weight" in message)
    assert f"tensor layers.1.attn.wkv.weight: the index maps it to {wrong}" in message


@pytest.mark.usefixtures("no_loading")
def test_all_problems_reported_at_once(tiny_ckpt: Path, tiny: ModelSpec, tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    _edit_shard_of(ckpt, "norm.weight", None)
    _edit_shard_of(ckpt, "layers.4.attn.attn_sink", torch.zeros(5))
    _edit_shard_of(ckpt, "layers.6.attn.indexer.weights_proj.weight", torch.zeros(16, 256))
    _edit_shard_of(ckpt, "layers.0.extra", torch.zeros(1), add=True)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(ckpt, tiny)
    problems = info.value.problems
    assert len(problems) == 4, problems
    for name in ("norm.weight", "layers.4.attn.attn_sink",
                 "layers.6.attn.indexer.weights_proj.weight", "layers.0.extra"):
        assert sum(name in p for p in problems) >= 1, name
    assert "4 problem(s)" in str(info.value)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def test_cli_writes_checkpoint(tiny_ckpt: Path, tiny: ModelSpec, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    assert cli_main(["builtin:tiny", str(out), "--seed", "1", "--no-dspark"]) == 0
    assert validate_checkpoint(out, tiny) == []
    assert not any(n.startswith("mtp.") for n in _index(out)["weight_map"])
    assert any("missing tensor mtp.0.main_proj.weight" in p
               for p in validate_checkpoint(out, tiny, include_dspark=True))
    seed1 = read_checkpoint(out, tiny)
    assert not torch.equal(seed1["embed.weight"], synthetic_weights(tiny, 0)["embed.weight"])
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("config", ["/nonexistent/config.json", "builtin:huge"])
def test_cli_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str) -> None:
    assert cli_main([config, str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepinfer-make-checkpoint: error:") and "Traceback" not in err
    assert config.split(":")[-1] in err
    assert not (tmp_path / "out").exists()


def test_cli_existing_output(tiny_ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["builtin:tiny", str(tiny_ckpt)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
