"""Helpers shared by the attention-side Triton modules: record decoders, the GPU-kind predicate
of their ``supports()`` rules, and output allocation (one place, so tests can poison it)."""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl


def alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Uninitialized output buffer (tests/gpu replaces this to NaN/0xFF-fill outputs)."""
    return torch.empty(shape, dtype=dtype, device=device)


def register_with_reference(op: str, fn: Any, supports: Any, ref_fn: Any = None) -> None:
    """Register ``fn`` as the triton backend of ``op``; for a new fused op also register its
    composed torch reference (kernels/reference/*_fused.py) unless one is registered, so that
    every op keeps a reference fallback and oracle."""
    from deepinfer.kernels import registry

    registry.register(op, "triton", fn, supports=supports, priority=10)
    if ref_fn is not None and registry.REFERENCE not in registry.available_backends(op):
        registry.register(op, registry.REFERENCE, ref_fn)


def cuda_sm90(spec: dict[str, Any]) -> bool:
    """GPU kind check of the attention-side ops: CUDA device, compute capability >= 9."""
    device = str(spec.get("device", "cuda"))
    return device.startswith("cuda") and int(spec.get("cc_major", 9)) >= 9


@triton.jit
def e2m1_to_f32(nib):
    """e2m1 nibbles (int32, 0..15) -> fp32, built from the bit pattern (no table)."""
    e = (nib >> 1) & 3
    m = nib & 1
    normal = ((e + 126) << 23) | (m << 22)
    bits = tl.where(e == 0, tl.where(m == 1, 126 << 23, 0), normal)
    bits = bits | ((nib & 8) << 28)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def ue8m0_to_f32(e):
    """ue8m0 bytes (int32) -> fp32 2^(e-127); byte 0 is the subnormal 2^-127, 255 is NaN."""
    bits = tl.where(e == 0, 1 << 22, e << 23)
    bits = tl.where(e == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


def register_triton_attention_side() -> None:
    """Register every attention-side Triton op (attention, cache writes, indexer, top-k,
    compressor); call from ``kernels/triton/__init__.py``."""
    from deepinfer.kernels.triton import attention, cache_write, compressor, indexer, topk

    attention.register_triton_attention()
    cache_write.register_triton_cache_write()
    indexer.register_triton_indexer()
    topk.register_triton_topk()
    compressor.register_triton_compressor()
