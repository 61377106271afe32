"""Safetensors shard files: names, header parsing without touching data, and tensor loading.

A safetensors file is ``u64 little-endian N | N bytes of JSON header | data``. The header maps each
tensor name to ``{"dtype": "F8_E4M3", "shape": [...], "data_offsets": [begin, end]}`` (offsets
relative to the start of the data), plus an optional ``"__metadata__"`` object.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
HEADER_LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100 << 20  # the safetensors format's own limit

# safetensors dtype strings <-> torch dtypes (those a V4.1 checkpoint uses, and a few more so that
# a wrong dtype is reported by name).
SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E8M0": torch.float8_e8m0fnu,
    "I8": torch.int8,
    "U8": torch.uint8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F64": torch.float64,
    "BOOL": torch.bool,
}
TORCH_TO_SAFETENSORS = {v: k for k, v in SAFETENSORS_DTYPES.items()}


def shard_file_name(index: int, num_shards: int) -> str:
    """``model-0000k-of-0000N.safetensors`` for the 1-based shard ``index``."""
    return f"model-{index:05d}-of-{num_shards:05d}.safetensors"


@dataclass(frozen=True)
class ShardEntry:
    """One tensor as a shard header describes it (no data read)."""

    dtype: str  # safetensors dtype string, e.g. "F8_E4M3"
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]  # [begin, end) relative to the data section


def read_shard_header(path: Path) -> tuple[dict[str, ShardEntry], list[str]]:
    """Parse a shard's header and check the file is long enough for every tensor it declares.

    Returns:
        (entries by tensor name, problems). Problems name the shard: unreadable file, bad header,
        truncated data (file shorter than the header-declared data end), or a tensor whose byte
        range does not match its dtype and shape. Reads only the first ``8 + N`` bytes.
    """
    problems: list[str] = []
    try:
        file_bytes = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(HEADER_LENGTH_BYTES)
            if len(prefix) < HEADER_LENGTH_BYTES:
                return {}, [f"shard {path.name}: truncated (only {file_bytes} bytes, no header)"]
            (header_bytes,) = struct.unpack("<Q", prefix)
            if header_bytes > MAX_HEADER_BYTES or HEADER_LENGTH_BYTES + header_bytes > file_bytes:
                return {}, [f"shard {path.name}: truncated or corrupt (header length "
                            f"{header_bytes} does not fit in a {file_bytes}-byte file)"]
            raw = json.loads(f.read(header_bytes))
    except OSError as exc:
        return {}, [f"shard {path.name}: cannot read ({exc.strerror or exc})"]
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return {}, [f"shard {path.name}: header is not valid JSON ({exc})"]
    if not isinstance(raw, dict):
        return {}, [f"shard {path.name}: header is not a JSON object"]

    entries: dict[str, ShardEntry] = {}
    data_end = 0
    for name, info in raw.items():
        if name == "__metadata__":
            continue
        try:
            entry = ShardEntry(str(info["dtype"]), tuple(int(x) for x in info["shape"]),
                               (int(info["data_offsets"][0]), int(info["data_offsets"][1])))
        except (KeyError, TypeError, ValueError, IndexError):
            problems.append(f"shard {path.name}: malformed header entry for tensor {name}")
            continue
        begin, end = entry.data_offsets
        dtype = SAFETENSORS_DTYPES.get(entry.dtype)
        if dtype is not None and end - begin != math.prod(entry.shape) * dtype.itemsize:
            problems.append(f"shard {path.name}: tensor {name} spans {end - begin} bytes, but "
                            f"{entry.dtype} {list(entry.shape)} needs "
                            f"{math.prod(entry.shape) * dtype.itemsize}")
        entries[name] = entry
        data_end = max(data_end, end)
    needed = HEADER_LENGTH_BYTES + header_bytes + data_end
    if file_bytes < needed:
        problems.append(f"shard {path.name}: truncated ({file_bytes} bytes, but its header "
                        f"declares data up to byte {needed})")
    return entries, problems


def load_tensors(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
    """Read the data of ``names`` from one shard (the only function here that reads tensor data)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {name: f.get_tensor(name) for name in names}
