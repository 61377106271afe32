"""Write a synthetic checkpoint directory in the released layout (model-spec §4).

    out_dir/
        config.json                          copy of the source config
        model-00001-of-0000N.safetensors     shards of at most ``shard_max_bytes`` tensor bytes
        ...                                  (a quantized weight and its .scale share a shard)
        model.safetensors.index.json         {"metadata": {"total_size": B}, "weight_map": {...}}

The directory appears atomically: everything is written into a temporary sibling directory that
is renamed to ``out_dir`` at the end. An existing non-empty ``out_dir`` is never overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from deepinfer.artifacts.model_spec import ModelSpec, builtin_config_path, load_model_spec
from deepinfer.artifacts.weight_names import SCALE_KINDS, expected_tensors
from deepinfer.runtime.weights.errors import CheckpointError
from deepinfer.runtime.weights.shards import CONFIG_FILE, INDEX_FILE, shard_file_name
from deepinfer.runtime.weights.synthetic import synthetic_checkpoint_tensors

TOKENIZER_FILE = "tokenizer.json"
DEFAULT_SHARD_MAX_BYTES = 2 << 20
"""2 MiB: small on purpose, so that even the tiny model (~6.4 MiB) spans several shards."""


def write_checkpoint(config: str | Path | dict[str, Any], out_dir: str | Path, seed: int = 0,
                     shard_max_bytes: int = DEFAULT_SHARD_MAX_BYTES,
                     include_dspark: bool = True) -> Path:
    """Synthesize the weights of ``config`` and write them as a sharded safetensors checkpoint.

    Args:
        config: a ``config.json`` path (or a directory holding one), ``"builtin:tiny"``, or a
            parsed config dict.
        out_dir: the directory to create; it must not exist or be empty.
        seed: weights are a pure function of (config, seed).
        shard_max_bytes: tensor bytes per shard (a single larger tensor gets a shard of its own).
        include_dspark: also write the DSpark ``mtp.*`` tensors.
    Returns:
        ``out_dir`` as a Path.
    Raises:
        ConfigError for a bad config; CheckpointError if ``out_dir`` is not empty; ValueError
        for a model too big to synthesize.
    """
    if shard_max_bytes <= 0:
        raise ValueError(f"shard_max_bytes must be positive, got {shard_max_bytes}")
    config_text, spec = _load_config(config)
    tokenizer_src = _tokenizer_beside(config)
    out_dir = Path(out_dir)
    _check_target(out_dir)
    tensors = synthetic_checkpoint_tensors(spec, seed=seed, include_dspark=include_dspark)
    shards = _plan_shards(tensors, spec, include_dspark, shard_max_bytes)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp_dir.mkdir()
    try:
        (tmp_dir / CONFIG_FILE).write_text(config_text)
        if tokenizer_src is not None:  # the released layout ships tokenizer.json beside config
            shutil.copyfile(tokenizer_src, tmp_dir / TOKENIZER_FILE)
        weight_map: dict[str, str] = {}
        for k, names in enumerate(shards, start=1):
            file_name = shard_file_name(k, len(shards))
            save_file({n: tensors[n].contiguous() for n in names}, str(tmp_dir / file_name),
                      metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(names, file_name))
        index = {"metadata": {"total_size": sum(_nbytes(t) for t in tensors.values())},
                 "weight_map": dict(sorted(weight_map.items()))}
        (tmp_dir / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
        _check_target(out_dir)  # nothing appeared there meanwhile
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked); rename needs the name free or an empty dir
        os.rename(tmp_dir, out_dir)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    return out_dir


def _load_config(config: str | Path | dict[str, Any]) -> tuple[str, ModelSpec]:
    """(text written to config.json, parsed spec)."""
    if isinstance(config, dict):
        return json.dumps(config, indent=2) + "\n", ModelSpec.from_dict(config, source="config")
    spec = load_model_spec(str(config))  # ConfigError names the file or the unknown built-in
    name = str(config)
    path = (builtin_config_path(name.removeprefix("builtin:")) if name.startswith("builtin:")
            else Path(config))
    if path.is_dir():
        path = path / CONFIG_FILE
    return path.read_text(), spec


def _tokenizer_beside(config: str | Path | dict[str, Any]) -> Path | None:
    """The ``tokenizer.json`` next to the source config (built-in or on disk), if any."""
    if isinstance(config, dict):
        return None
    name = str(config)
    if name.startswith("builtin:"):
        path = builtin_config_path(name.removeprefix("builtin:"))
    else:
        path = Path(config)
    folder = path if path.is_dir() else path.parent
    candidate = folder / TOKENIZER_FILE
    return candidate if candidate.is_file() else None


def _check_target(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise CheckpointError(f"{out_dir}: already exists and is not an empty directory; "
                              "refusing to overwrite it (choose a new path or remove it)")


def _plan_shards(tensors: dict[str, torch.Tensor], spec: ModelSpec, include_dspark: bool,
                 shard_max_bytes: int) -> list[list[str]]:
    """Greedy shards in checkpoint order; a weight and its ``.scale`` stay together."""
    units = [[t.name] + ([t.scale_name] if t.scale_name else [])
             for t in expected_tensors(spec, include_dspark).values() if t.kind not in SCALE_KINDS]
    shards: list[list[str]] = [[]]
    shard_bytes = 0
    for unit in units:
        unit_bytes = sum(_nbytes(tensors[n]) for n in unit)
        if shards[-1] and shard_bytes + unit_bytes > shard_max_bytes:
            shards.append([])
            shard_bytes = 0
        shards[-1].extend(unit)
        shard_bytes += unit_bytes
    return shards


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()
