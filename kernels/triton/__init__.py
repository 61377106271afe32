"""Triton kernels (the main GPU backend); each beside its torch reference in ../reference.

Importing this package does not import triton: call :func:`register_triton_backend` (the planner
or runtime does, once) to import the kernel modules and register them under backend "triton".
``HAS_TRITON`` says whether triton itself imports.
"""

from __future__ import annotations

import importlib

BACKEND = "triton"
PRIORITY = 10


def _probe_triton() -> bool:
    try:
        import triton  # noqa: F401
    except (ImportError, OSError, RuntimeError):
        return False
    return True


HAS_TRITON: bool = _probe_triton()

# Attention-side modules (another owner), each exposing register_triton_<area>(); optional.
_OPTIONAL_AREAS = ("attention", "cache_write", "compressor", "indexer", "records", "topk")


def _register_gemm_side() -> list[str]:
    """Register the GEMM-side kernels; returns the op names."""
    from deepinfer.kernels import registry
    from deepinfer.kernels.triton import (
        engram,
        engram_rows,
        gemm_fp8,
        linear,
        mhc,
        mhc_norm,
        moe_experts,
        moe_routing,
        norm,
        quant_act,
        quant_fp4,
        rope,
    )

    table = {
        "fake_quant_fp8_block32": (quant_act.fake_quant_fp8_block32, quant_act.supports_q8_32),
        "linear_quant_act": (linear.linear_quant_act, gemm_fp8.supports_linear_quant_act),
        "route_sqrtsoftplus": (moe_routing.route_sqrtsoftplus, moe_routing.supports_route),
        "moe_routed_experts": (moe_experts.moe_routed_experts, moe_experts.supports_moe),
        "expert_ffn": (moe_experts.expert_ffn, moe_experts.supports_moe),
        "hc_coeffs": (mhc.hc_coeffs, mhc.supports_mhc),
        "hc_collapse": (mhc.hc_collapse, mhc.supports_mhc),
        "hc_expand": (mhc.hc_expand, mhc.supports_mhc),
        "hc_expand_norm": (mhc_norm.hc_expand_norm, mhc.supports_mhc),
        "engram_inject": (engram.engram_inject, engram.supports_engram),
        "engram_hash_windows": (engram.engram_hash_windows, engram.supports_engram),
        "engram_rows": (engram_rows.engram_rows, engram_rows.supports_engram_rows),
        "rms_norm": (norm.rms_norm, norm.supports_rms_norm),
        "rms_norm_q8": (norm.rms_norm_q8, norm.supports_rms_norm),
        "linear": (linear.linear, linear.supports_linear),
        "grouped_linear": (linear.grouped_linear, linear.supports_linear),
        "apply_rope": (rope.apply_rope, rope.supports_rope),
        "fake_quant_fp4_ue8m0_block32": (quant_fp4.fake_quant_fp4_ue8m0_block32,
                                         quant_fp4.supports_fake_quant_fp4),
    }
    for op, (fn, supports) in table.items():
        registry.register(op, BACKEND, fn, supports=supports, priority=PRIORITY)
    return sorted(table)


def register_triton_backend() -> list[str]:
    """Import every Triton kernel module and register its ops; returns the registered op names.

    Does nothing (returns []) without triton. Attention-side areas whose module is missing or does
    not yet expose ``register_triton_<area>`` are skipped.
    """
    if not HAS_TRITON:
        return []
    from deepinfer.kernels import registry

    _register_gemm_side()
    for area in _OPTIONAL_AREAS:
        try:
            module = importlib.import_module(f"deepinfer.kernels.triton.{area}")
            register_area = getattr(module, f"register_triton_{area}")
        except (ImportError, AttributeError):
            continue
        register_area()
    return [op for op in registry.ops() if BACKEND in registry.available_backends(op)]
