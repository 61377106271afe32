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

The real model (~474 GiB) must never be materialised on CPU: anything estimated above
``MAX_SYNTHETIC_BYTES`` is refused before a single tensor is made.
"""

from __future__ import annotations

import hashlib
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
"""Largest checkpoint (stored bytes) synthesize will build in memory."""

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


def synthetic_tensors(specs: Iterable[TensorSpec], seed: int) -> dict[str, torch.Tensor]:
    """The synthetic values of some tensors (a quantized weight brings its scale along). A
    tensor's values depend only on ``(seed, name)``, so any subset equals the full checkpoint's."""
    out: dict[str, torch.Tensor] = {}
    for t in specs:
        if t.name in out or t.kind in SCALE_KINDS:
            continue  # a scale is made together with its weight
        quantize = _QUANTIZERS.get(t.kind)
        if quantize is None:
            out[t.name] = _sample(t, seed).to(t.dtype)
        else:
            out[t.name], out[t.scale_name] = quantize(_sample(t, seed))
    return out


def tensor_seed(seed: int, name: str) -> int:
    """The generator seed of tensor ``name``: a stable 63-bit hash (not Python's ``hash``)."""
    digest = hashlib.blake2b(f"{seed}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _sample(t: TensorSpec, seed: int) -> torch.Tensor:
    """float32 values of ``t.logical_shape`` before quantization (see the module docstring)."""
    if t.kind in _QUANTIZERS:
        mean, std = 0.0, (_ENGRAM_ROW_STD if t.kind == KIND_FP8_ROWS else _QUANTIZED_STD)
    else:
        mean, std = next((m, s) for pattern, m, s in _VALUE_RULES if pattern.search(t.name))
    generator = torch.Generator().manual_seed(tensor_seed(seed, t.name))
    return torch.randn(t.logical_shape, generator=generator, dtype=torch.float32) * std + mean
