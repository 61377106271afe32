"""Compressor pooling (model-spec §2.5, §3.3): per-channel softmax over a group's R tokens.

``compress_pool`` is the registered op on complete groups (G, R, D). ``compress_pool_chunk``
pools straight from the fp32 partial-group state plus this chunk's projections, without
concatenating them: virtual token v = g * R + r reads ``partial[v]`` if v < P, else
``chunk[v - P]`` (the state carried across decode steps and prefill chunks). One program per
(group, BD channels); softmax and the weighted sum are fp32.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from deepinfer.kernels.triton import attn_common
from deepinfer.kernels.triton.attn_common import cuda_sm90
from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2

BLOCK_CHANNELS = 128
NUM_WARPS = 4


@triton.jit
def _compress_pool_kernel(
    pkv_ptr, pgate_ptr, stride_p, num_partial,
    kv_ptr, gate_ptr, stride_kv, out_ptr, stride_out,
    R: tl.constexpr, RP: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
):
    g = tl.program_id(0)
    c = tl.program_id(1) * BD + tl.arange(0, BD)
    r = tl.arange(0, RP)
    v = g * R + r  # virtual token index in [partial ; chunk]
    in_group = r < R
    from_p = in_group & (v < num_partial)
    from_c = in_group & (v >= num_partial)
    vc = tl.where(from_c, v - num_partial, 0).to(tl.int64)
    vp = tl.where(from_p, v, 0).to(tl.int64)
    cm = (c < D)[None, :]
    kv = tl.load(kv_ptr + vc[:, None] * stride_kv + c[None, :], mask=from_c[:, None] & cm,
                 other=0.0)
    kv += tl.load(pkv_ptr + vp[:, None] * stride_p + c[None, :], mask=from_p[:, None] & cm,
                  other=0.0)
    gt = tl.load(gate_ptr + vc[:, None] * stride_kv + c[None, :], mask=from_c[:, None] & cm,
                 other=0.0)
    gt += tl.load(pgate_ptr + vp[:, None] * stride_p + c[None, :], mask=from_p[:, None] & cm,
                  other=0.0)
    gt = tl.where(in_group[:, None], gt.to(tl.float32), float("-inf"))
    m = tl.max(gt, axis=0)
    e = tl.exp(gt - m[None, :])
    w = e / tl.sum(e, axis=0)[None, :]
    out = tl.sum(w * kv.to(tl.float32), axis=0)
    tl.store(out_ptr + g.to(tl.int64) * stride_out + c, out, mask=c < D)


def launch_meta(ratio: int, d: int) -> dict[str, Any]:
    return dict(R=ratio, RP=next_power_of_2(ratio), D=d,
                BD=min(BLOCK_CHANNELS, next_power_of_2(d)), num_warps=NUM_WARPS,
                num_stages=1)


def _launch(pkv, pgate, kv, gate, ratio, groups, out):
    d = kv.shape[-1]
    num_partial = pkv.shape[0]
    if groups == 0:
        return out
    if pkv.shape[0] == 0:  # no carried state: never read, but keep a valid pointer
        pkv, pgate = kv, gate
    meta = launch_meta(ratio, d)
    _compress_pool_kernel[(groups, cdiv(d, meta["BD"]))](
        pkv, pgate, pkv.stride(0), num_partial, kv, gate, kv.stride(0), out, out.stride(0),
        **meta)
    return out


def compress_pool(kv: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Triton version of ``reference.compressor.compress_pool``: (G, R, D) fp32 -> (G, D)."""
    g, r, d = kv.shape
    out = attn_common.alloc((g, d), torch.float32, kv.device)
    flat_kv, flat_gate = kv.reshape(g * r, d), gate.reshape(g * r, d)
    return _launch(flat_kv[:0], flat_gate[:0], flat_kv, flat_gate, r, g, out)


def compress_pool_chunk(partial_kv: torch.Tensor, partial_gate: torch.Tensor, kv: torch.Tensor,
                        gate: torch.Tensor, ratio: int) -> torch.Tensor:
    """Triton version of ``reference.compressor_fused.compress_pool_chunk``."""
    d = kv.shape[-1]
    groups = (partial_kv.shape[0] + kv.shape[0]) // ratio
    out = attn_common.alloc((groups, d), torch.float32, kv.device)
    return _launch(partial_kv, partial_gate, kv, gate, ratio, groups, out)


def supports_compress_pool(spec: dict[str, Any]) -> bool:
    """Any ratio <= 64 and any head_dim; rows contiguous."""
    return cuda_sm90(spec) and 1 <= int(spec.get("compress_ratio", 2)) <= 64


def aot_cases() -> list[dict[str, Any]]:
    types = {"pkv_ptr": "*fp32", "pgate_ptr": "*fp32", "kv_ptr": "*fp32", "gate_ptr": "*fp32",
             "out_ptr": "*fp32"}
    return [dict(name=f"compress_pool r{r} D512", module=__name__, kernel="_compress_pool_kernel",
                 types=types, meta=launch_meta(r, 512)) for r in (1, 2)]


def register_triton_compressor() -> None:
    from deepinfer.kernels.reference import compressor_fused

    attn_common.register_with_reference("compress_pool", compress_pool, supports_compress_pool)
    attn_common.register_with_reference("compress_pool_chunk", compress_pool_chunk,
                                        supports_compress_pool,
                                        compressor_fused.compress_pool_chunk)
