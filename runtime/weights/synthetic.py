"""Deterministic random checkpoints in exactly the on-disk dtypes and shapes (for tests and demos).

Each tensor draws from its own generator, seeded by a stable hash of ``(seed, name)``, so a tensor's
values do not depend on which other tensors exist (e.g. with or without DSpark). Values before
quantization, by tensor:

    quantized matrices (fp8, fp4)   N(0, 0.02), then quantize_fp8_weight / quantize_fp4_weight
    engram tables (fp8_rows)        N(0, 1), then quantize_fp8_rows
    *norm.weight                    1 + 0.1 N(0, 1)
    hc_*_fn / hc_*_base             N(0, 0.02) / N(0, 0.1)
    hc_*_scale                      0.5 + 0.01 N(0, 1)
    attn_sink                       N(0, 1)
    gate.bias, gate.bias_vl         N(0, 0.01) (independent draws)
    engram q_weight, k_weight       1 + 0.1 N(0, 1)
    any other matrix or vector      N(0, 0.02)   (embed, head, gate.weight, compressor, indexer, …)

Where the values are made (``device``): on the CPU, one ``torch.randn`` call per tensor from a
CPU generator, then the quantizer, all on the host. On a CUDA device each tensor's generator is a
CUDA generator with the same seed, and sampling and quantizing run on the device; only the stored
tensors are kept. CUDA's generator is not the CPU's, so **CUDA values differ from CPU values**: a
synthetic run is reproducible on the same device kind (same seed, same values), not across kinds.
On an accelerator a tensor above ``DEVICE_CHUNK_VALUES`` values is sampled in row chunks (a
multiple of 32 rows, so every quantization block and FP8 tile lies in one chunk), one ``randn``
call per chunk from the tensor's one generator: bounded scratch memory; deterministic too.

Size limits (:func:`check_synthetic_size`): host generation refuses anything above
``MAX_SYNTHETIC_BYTES`` (the real model, ~474 GiB, must never be materialised on the CPU); on a
CUDA device the limit is the device's free memory. Both are checked before a tensor is made.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable

import torch

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.artifacts.weight_names import (
    KIND_FP4,
    KIND_FP8,
    KIND_FP8_ROWS,
    SCALE_KINDS,
    TensorSpec,
    expected_tensors,
)
from deepinfer.kernels.formats import quantize_fp4_weight, quantize_fp8_rows, quantize_fp8_weight

MAX_SYNTHETIC_BYTES = 2 << 30
"""Largest checkpoint (stored bytes) synthesize will build in host memory."""
DEVICE_CHUNK_VALUES = 1 << 26
"""Most values one ``randn`` call samples on an accelerator (256 MiB of fp32 scratch)."""
_TILE_ROWS = 32  # rows of an FP8 weight tile: accelerator chunks are multiples of it

# (regex on the name, mean, std) for unquantized tensors; the first match wins.
_VALUE_RULES: tuple[tuple[re.Pattern[str], float, float], ...] = tuple(
    (re.compile(pattern), mean, std) for pattern, mean, std in (
        (r"norm\.weight$", 1.0, 0.1),
        (r"hc_\w+_fn$", 0.0, 0.02),
        (r"hc_\w+_base$", 0.0, 0.1),
        (r"hc_\w+_scale$", 0.5, 0.01),
        (r"attn_sink$", 0.0, 1.0),
        (r"gate\.bias(_vl)?$", 0.0, 0.01),
        (r"engram\.[qk]_weight$", 1.0, 0.1),
        (r"", 0.0, 0.02),
    ))
_QUANTIZED_STD = 0.02
_ENGRAM_ROW_STD = 1.0
_QUANTIZERS = {KIND_FP8: quantize_fp8_weight, KIND_FP4: quantize_fp4_weight,
               KIND_FP8_ROWS: quantize_fp8_rows}


def estimated_checkpoint_bytes(spec: ModelSpec, include_dspark: bool = True) -> int:
    """Stored bytes of every checkpoint tensor of ``spec`` (no allocation)."""
    return sum(t.num_bytes for t in expected_tensors(spec, include_dspark).values())


def describe_spec(spec: ModelSpec) -> str:
    """A one-line identification of a model spec for error messages."""
    return (f"model (hidden_size {spec.hidden_size}, {spec.num_hidden_layers} layers, "
            f"{spec.n_routed_experts} experts, vocab {spec.vocab_size})")


def synthetic_checkpoint_tensors(spec: ModelSpec, seed: int = 0,
                                 include_dspark: bool = True) -> dict[str, torch.Tensor]:
    """Every checkpoint tensor of ``spec`` in its stored dtype and shape, deterministic in ``seed``.

    Returns:
        name -> tensor, in ``expected_tensors`` order; quantized weights come with their
        ``.scale`` (float8_e8m0fnu) exactly as a checkpoint stores them.
    Raises:
        ValueError (naming the model) if the checkpoint would exceed ``MAX_SYNTHETIC_BYTES``.
    """
    specs = expected_tensors(spec, include_dspark)
    total = sum(t.num_bytes for t in specs.values())
    if total > MAX_SYNTHETIC_BYTES:
        raise ValueError(
            f"refusing to synthesize {describe_spec(spec)}: its checkpoint would take "
            f"{total / 2**30:.1f} GiB, above the {MAX_SYNTHETIC_BYTES / 2**30:.0f} GiB limit for "
            "in-memory synthetic weights (use a small config such as builtin:tiny)")
    out = synthetic_tensors(specs.values(), seed)
    return {name: out[name] for name in specs}


def synthetic_tensors(specs: Iterable[TensorSpec], seed: int,
                      device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The synthetic values of some tensors (a quantized weight brings its scale along), made on
    ``device``. A tensor's values depend only on ``(seed, name)`` and the device kind (module
    docstring), so any subset equals the full checkpoint's on the same kind of device."""
    device = torch.device(device)
    out: dict[str, torch.Tensor] = {}
    for t in specs:
        if t.name in out or t.kind in SCALE_KINDS:
            continue  # a scale is made together with its weight
        out.update(_make(t, seed, device))
    return out


def check_synthetic_size(num_bytes: int, device: torch.device | str, what: str) -> None:
    """Refuse to synthesize ``num_bytes`` stored bytes of ``what`` on ``device`` (ValueError):
    above ``MAX_SYNTHETIC_BYTES`` on the host, above the free memory of a CUDA device."""
    device = torch.device(device)
    if device.type == "cpu":
        if num_bytes > MAX_SYNTHETIC_BYTES:
            raise ValueError(f"refusing to synthesize {num_bytes / 2**30:.1f} GiB of weights for "
                             f"{what} on the host (limit {MAX_SYNTHETIC_BYTES / 2**30:.0f} GiB)")
    elif device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        problem = device_fit_problem(num_bytes, free, device, what)
        if problem is not None:
            raise ValueError(problem)


def device_fit_problem(num_bytes: int, free_bytes: int, device: torch.device | str,
                       what: str) -> str | None:
    """Why ``num_bytes`` of weights of ``what`` do not fit in ``free_bytes`` of ``device``, or
    None when they fit (the pure size check of :func:`check_synthetic_size`)."""
    if num_bytes <= free_bytes:
        return None
    return (f"refusing to load {what} onto {device}: its weights take {num_bytes / 1e9:.1f} GB "
            f"({num_bytes / 2**30:.1f} GiB) but the device has only {free_bytes / 1e9:.1f} GB "
            f"({free_bytes / 2**30:.1f} GiB) free")


def tensor_seed(seed: int, name: str) -> int:
    """The generator seed of tensor ``name``: a stable 63-bit hash (not Python's ``hash``)."""
    digest = hashlib.blake2b(f"{seed}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _make(t: TensorSpec, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    """``t`` (and its scale) on ``device``: one sample on the host, row chunks on an accelerator
    when ``t`` is large (module docstring)."""
    generator = torch.Generator(device=device).manual_seed(tensor_seed(seed, t.name))
    shape = t.logical_shape
    if device.type == "cpu" or len(shape) < 2 or math.prod(shape) <= DEVICE_CHUNK_VALUES:
        return _stored(t, _sample(t, generator, shape, device))
    chunk = DEVICE_CHUNK_VALUES // math.prod(shape[1:]) // _TILE_ROWS * _TILE_ROWS
    return _chunked(t, generator, device, max(_TILE_ROWS, chunk))


def _chunked(t: TensorSpec, generator: torch.Generator, device: torch.device,
             chunk: int) -> dict[str, torch.Tensor]:
    """``t`` (and its scale) sampled and stored ``chunk`` rows (a multiple of 32) at a time."""
    shape, rows = t.logical_shape, t.logical_shape[0]
    out: dict[str, torch.Tensor] = {}
    offsets: dict[str, int] = {}
    for r in range(0, rows, chunk):
        piece = _stored(t, _sample(t, generator, (min(chunk, rows - r), *shape[1:]), device))
        for name, p in piece.items():
            if name not in out:
                total = t.shape[0] if name == t.name else _scale_rows(t)
                out[name] = torch.empty((total, *p.shape[1:]), dtype=p.dtype, device=device)
                offsets[name] = 0
            out[name][offsets[name]:offsets[name] + p.shape[0]].copy_(p)
            offsets[name] += p.shape[0]
    return out


def _scale_rows(t: TensorSpec) -> int:
    """Rows of ``t``'s scale: one per 32-row tile for FP8 weights, one per row otherwise."""
    return -(-t.shape[0] // _TILE_ROWS) if t.kind == KIND_FP8 else t.shape[0]


def _stored(t: TensorSpec, values: torch.Tensor) -> dict[str, torch.Tensor]:
    """fp32 ``values`` of (rows of) ``t`` as stored: quantized with their scale, or cast."""
    quantize = _QUANTIZERS.get(t.kind)
    if quantize is None:
        return {t.name: values.to(t.dtype)}
    weight, scale = quantize(values)
    return {t.name: weight, t.scale_name: scale}


def _sample(t: TensorSpec, generator: torch.Generator, shape: tuple[int, ...],
            device: torch.device) -> torch.Tensor:
    """float32 values of ``shape`` (``t.logical_shape`` or a row chunk of it) before
    quantization (see the module docstring)."""
    if t.kind in _QUANTIZERS:
        mean, std = 0.0, (_ENGRAM_ROW_STD if t.kind == KIND_FP8_ROWS else _QUANTIZED_STD)
    else:
        mean, std = next((m, s) for pattern, m, s in _VALUE_RULES if pattern.search(t.name))
    return torch.randn(shape, generator=generator, dtype=torch.float32, device=device) * std + mean
