"""Read a sharded safetensors checkpoint's backbone tensors, validating it first.

Invariant: no tensor data is read until the whole checkpoint has been checked against
``expected_tensors``. Step 1 parses ``model.safetensors.index.json``; Step 2 parses every shard
header (8-byte length + JSON, no data) and checks each file is as long as its header declares;
Step 3 compares names, dtypes and shapes with the name table. Every problem found is collected,
and if there is any, one CheckpointError lists them all. Only then Step 4 loads.

Two result forms, both name -> tensor in name-table order:
  stored       (``read_stored_tensors`` / ``synthetic_stored_tensors``, what the loaders use)
               every tensor as on disk, ``.scale`` tensors included, scales checked (no NaN);
  dequantized  (``read_checkpoint`` / ``synthetic_weights``, the bf16 oracle of the tests)
               fp8/fp4 matrices and engram tables as bfloat16 (exact), ``.scale`` merged away.
Vision, aligner and image-embedding tensors are skipped; DSpark ``mtp.*`` tensors are checked and
returned only with ``include_dspark=True`` (and skipped otherwise).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.artifacts.weight_names import (
    TensorSpec,
    expected_tensors,
    is_dspark_name,
    is_skipped_name,
)
from deepinfer.runtime.weights import shards
from deepinfer.runtime.weights.dequant import check_scales, dequantize_tensors
from deepinfer.runtime.weights.errors import CheckpointError
from deepinfer.runtime.weights.shards import INDEX_FILE, TORCH_TO_SAFETENSORS
from deepinfer.runtime.weights.synthetic import describe_spec, synthetic_checkpoint_tensors


def read_stored_tensors(ckpt_dir: str | Path, spec: ModelSpec,
                        include_dspark: bool = False) -> dict[str, torch.Tensor]:
    """Validate the checkpoint in ``ckpt_dir`` against ``spec``, then load it as stored.

    Returns:
        name -> tensor for every backbone tensor (plus ``mtp.*`` with ``include_dspark``) in its
        on-disk dtype and shape, ``.scale`` tensors included, in name-table order.
    Raises:
        CheckpointError listing every problem (missing index or shard, truncated shard, missing,
        unexpected, mis-shaped or mis-typed tensor), before any tensor data is read; or naming
        a corrupt scale (ue8m0 byte 255) after reading.
    """
    ckpt_dir = Path(ckpt_dir)
    report = _inspect(ckpt_dir, spec, include_dspark)
    if report.problems:
        lines = "\n".join(f"  - {p}" for p in report.problems)
        raise CheckpointError(
            f"checkpoint {ckpt_dir} does not match {describe_spec(spec)}; "
            f"{len(report.problems)} problem(s):\n{lines}", report.problems)
    stored: dict[str, torch.Tensor] = {}
    for shard_name, names in report.names_by_shard.items():
        stored.update(shards.load_tensors(ckpt_dir / shard_name, names))
    try:
        check_scales(stored, report.wanted.values())
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {ckpt_dir}: {exc}") from None
    return {name: stored[name] for name in report.wanted}


def read_checkpoint(ckpt_dir: str | Path, spec: ModelSpec,
                    include_dspark: bool = False) -> dict[str, torch.Tensor]:
    """``read_stored_tensors`` dequantized: quantized weights as bfloat16 of their logical
    [O, I] shape, no ``.scale`` names (the bf16 oracle form; the loaders keep tensors as stored).
    """
    return dequantize_tensors(read_stored_tensors(ckpt_dir, spec, include_dspark),
                              wanted_tensors(spec, include_dspark).values())


def validate_checkpoint(ckpt_dir: str | Path, spec: ModelSpec,
                        include_dspark: bool = False) -> list[str]:
    """The problems ``read_checkpoint`` would report (empty if the checkpoint is loadable).

    Reads only the index and the shard headers.
    """
    return _inspect(Path(ckpt_dir), spec, include_dspark).problems


def synthetic_stored_tensors(spec: ModelSpec, seed: int = 0,
                             include_dspark: bool = False) -> dict[str, torch.Tensor]:
    """The in-memory path (``weights: synthetic``): what ``read_stored_tensors`` would return for
    a checkpoint written by ``write_checkpoint(config, dir, seed)``, bit for bit, without files."""
    stored = synthetic_checkpoint_tensors(spec, seed=seed, include_dspark=include_dspark)
    return {name: stored[name] for name in wanted_tensors(spec, include_dspark)}


def synthetic_weights(spec: ModelSpec, seed: int = 0,
                      include_dspark: bool = False) -> dict[str, torch.Tensor]:
    """``synthetic_stored_tensors`` dequantized: what ``read_checkpoint`` would return for a
    checkpoint written by ``write_checkpoint(config, dir, seed)``, bit for bit, without files."""
    stored = synthetic_checkpoint_tensors(spec, seed=seed, include_dspark=include_dspark)
    return dequantize_tensors(stored, wanted_tensors(spec, include_dspark).values())


def wanted_tensors(spec: ModelSpec, include_dspark: bool) -> dict[str, TensorSpec]:
    """The tensors a reader needs: backbone, plus DSpark with ``include_dspark`` (with scales)."""
    return {name: t for name, t in expected_tensors(spec, include_dspark).items()
            if t.is_backbone or (include_dspark and is_dspark_name(name))}


# ---------------------------------------------------------------------------------------------
# Validation (index + headers only)
# ---------------------------------------------------------------------------------------------


@dataclass
class _Report:
    wanted: dict[str, TensorSpec]
    problems: list[str] = field(default_factory=list)
    names_by_shard: dict[str, list[str]] = field(default_factory=dict)  # what Step 4 loads


def _inspect(ckpt_dir: Path, spec: ModelSpec, include_dspark: bool) -> _Report:
    report = _Report(wanted_tensors(spec, include_dspark))
    # Step 1: the index.
    weight_map = _read_index(ckpt_dir / INDEX_FILE, report.problems)
    if weight_map is None:
        return report
    # Step 2: every shard header the index names.
    headers: dict[str, dict[str, shards.ShardEntry] | None] = {}
    for shard_name in sorted(set(weight_map.values())):
        headers[shard_name] = _read_header(ckpt_dir, shard_name, weight_map, report.problems)
    # Step 3: coverage, dtypes and shapes.
    for name, shard_name in weight_map.items():
        expected = report.wanted.get(name)
        if expected is None:
            if not (is_skipped_name(name) and not (include_dspark and is_dspark_name(name))):
                report.problems.append(f"unexpected tensor {name} (in {shard_name}): not part of "
                                       f"{describe_spec(spec)}")
            continue
        header = headers[shard_name]
        if header is None:
            continue  # the shard's own problem is already reported
        entry = header.get(name)
        if entry is None:
            report.problems.append(f"tensor {name}: the index maps it to {shard_name}, which "
                                   "does not contain it")
            continue
        report.problems.extend(_compare(expected, entry, shard_name))
        report.names_by_shard.setdefault(shard_name, []).append(name)
    for name, expected in report.wanted.items():
        if name not in weight_map:
            report.problems.append(f"missing tensor {name} (expected {_describe(expected)})")
    return report


def _read_index(path: Path, problems: list[str]) -> dict[str, str] | None:
    """The index's weight_map, or None (with a problem naming the file)."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        problems.append(f"{path}: missing checkpoint index (expected {INDEX_FILE} in "
                        f"{path.parent})")
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(f"{path}: unreadable checkpoint index ({exc})")
        return None
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        problems.append(f"{path}: expected an object with a 'weight_map' of tensor name -> "
                        "shard file name")
        return None
    return weight_map


def _read_header(ckpt_dir: Path, shard_name: str, weight_map: dict[str, str],
                 problems: list[str]) -> dict[str, shards.ShardEntry] | None:
    """A shard's header entries, or None if the shard is missing or unusable."""
    path = ckpt_dir / shard_name
    if Path(shard_name).name != shard_name or not path.is_file():
        names = [n for n, s in weight_map.items() if s == shard_name]
        problems.append(f"shard {shard_name} does not exist in {ckpt_dir}, but the index maps "
                        f"{len(names)} tensor(s) to it: {', '.join(names)}")
        return None
    entries, shard_problems = shards.read_shard_header(path)
    problems.extend(shard_problems)
    return None if shard_problems else entries


def _compare(expected: TensorSpec, entry: shards.ShardEntry, shard_name: str) -> list[str]:
    problems = []
    want_dtype = TORCH_TO_SAFETENSORS[expected.dtype]
    if entry.dtype != want_dtype:
        problems.append(f"tensor {expected.name}: dtype {entry.dtype} in {shard_name}, expected "
                        f"{want_dtype}")
    if entry.shape != expected.shape:
        problems.append(f"tensor {expected.name}: shape {list(entry.shape)} in {shard_name}, "
                        f"expected {list(expected.shape)}")
    return problems


def _describe(t: TensorSpec) -> str:
    return f"{TORCH_TO_SAFETENSORS[t.dtype]} {list(t.shape)}"
