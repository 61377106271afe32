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


@triton.jit
def split_range(num_idx, split, NSPLIT: tl.constexpr, BK: tl.constexpr):
    """[lo, hi) of a row list of ``num_idx`` entries for row split ``split`` of NSPLIT (whole
    BK chunks per split; all of it when NSPLIT == 1)."""
    lo = 0
    hi = num_idx
    if NSPLIT > 1:
        per_split = tl.cdiv(tl.cdiv(num_idx, BK), NSPLIT) * BK
        lo = split * per_split
        hi = tl.minimum(lo + per_split, num_idx)
    return lo, hi


@triton.jit
def merge_splits_kernel(part_ptr, ml_ptr, sink_ptr, out_ptr, stride_on, stride_oh, num_queries,
                        num_heads, D: tl.constexpr, NSPLIT: tl.constexpr, BD: tl.constexpr):
    """out[n, h] = sum_s 2^(m_s - M) acc_s / (sum_s 2^(m_s - M) l_s + 2^(sink - M)), M = max_s
    m_s (0 when every split saw no row): the single-pass softmax with sink, from the splits."""
    n = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    s = tl.arange(0, NSPLIT)
    row = (s * num_queries + n) * num_heads + h  # [NSPLIT]
    m_s = tl.load(ml_ptr + row * 2)
    l_s = tl.load(ml_ptr + row * 2 + 1)
    m = tl.max(m_s, axis=0)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    w = tl.where(m_s == float("-inf"), 0.0, tl.exp2(m_s - m_use))  # [NSPLIT]
    sink = tl.load(sink_ptr + h).to(tl.float32) * 1.4426950408889634
    denom = tl.sum(w * l_s, axis=0) + tl.exp2(sink - m_use)
    for d0 in tl.static_range(0, D, BD):
        cols = d0 + tl.arange(0, BD)
        acc = tl.load(part_ptr + row[:, None] * D + cols[None, :])  # [NSPLIT, BD]
        o = tl.sum(w[:, None] * acc, axis=0) / denom
        tl.store(out_ptr + n * stride_on + h * stride_oh + cols, o.to(out_ptr.dtype.element_ty))


def split_buffers(nsplit: int, q: torch.Tensor, out: torch.Tensor):
    """(part (NSPLIT, N, H, D), ml (NSPLIT, N, H, 2)) fp32 for a row-split launch of q
    (N, H, D); ``out`` twice (unused placeholders) without splits."""
    if nsplit == 1:
        return out, out
    n, h, d = q.shape
    return (alloc((nsplit, n, h, d), torch.float32, q.device),
            alloc((nsplit, n, h, 2), torch.float32, q.device))


def merge_splits(part: torch.Tensor, ml: torch.Tensor, sink: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
    """out (N, H, D) from the NSPLIT partials of ``split_buffers`` (one launch)."""
    nsplit, n, h, d = part.shape
    merge_splits_kernel[(n, h)](part, ml, sink, out, out.stride(0), out.stride(1), n, h,
                                D=d, NSPLIT=nsplit, BD=min(d, 256), num_warps=4)
    return out


def register_triton_attention_side() -> None:
    """Register every attention-side Triton op (attention, cache writes, indexer, top-k,
    compressor); call from ``kernels/triton/__init__.py``."""
    from deepinfer.kernels.triton import attention, cache_write, compressor, indexer, topk

    attention.register_triton_attention()
    cache_write.register_triton_cache_write()
    indexer.register_triton_indexer()
    topk.register_triton_topk()
    compressor.register_triton_compressor()
