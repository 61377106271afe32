"""Kernel choice: one backend per registered op, recorded in the plan.

CPU plans use ``reference`` for every op (the torch oracle, which runs anywhere). GPU plans use
``triton`` on SM90 (Hopper) and SM100 (Blackwell) for the ops the Triton backend covers, and
``reference`` elsewhere, each fallback with a warning (it is slow, not wrong).

What Triton covers is read from ``TRITON_CAPABILITIES`` only, a static table of op -> GPU archs
listing the ops that have a kernel in ``kernels/triton/`` (a test checks each one is defined
there, by reading the source without importing it). Planning therefore never needs triton
installed, and a plan never depends on which modules happen to be imported in the planning
process (plans must be byte-identical across runs). The Triton ``supports()`` predicates accept
CUDA compute capability >= 9, hence SM90 and SM100. Ops still missing fall back to the
reference with a warning until their kernels land and join the table.

The runtime checks at load that each recorded backend imports and refuses otherwise, naming
the plan field, so a stale table fails loudly at start, never silently.
"""

from __future__ import annotations

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.kernels import registry
from deepinfer.planner.topology import Topology

__all__ = ["TRITON_ARCHS", "TRITON_CAPABILITIES", "plan_kernel_choice"]

REFERENCE = registry.REFERENCE
TRITON = "triton"
TRITON_ARCHS = (90, 100)
TRITON_CAPABILITIES: dict[str, tuple[int, ...]] = {
    "apply_rope": TRITON_ARCHS,  # kernels/triton/rope.py
    "compress_pool": TRITON_ARCHS,  # kernels/triton/compressor.py
    "compressed_kv_records": TRITON_ARCHS,  # kernels/triton/cache_write.py
    "engram_hash_windows": TRITON_ARCHS,  # kernels/triton/engram.py
    "engram_inject": TRITON_ARCHS,  # kernels/triton/engram.py
    "engram_rows": TRITON_ARCHS,  # kernels/triton/engram_rows.py
    "expert_ffn": TRITON_ARCHS,  # kernels/triton/moe_experts.py
    "fake_quant_fp4_ue8m0_block32": TRITON_ARCHS,  # kernels/triton/quant_fp4.py
    "fake_quant_fp8_block32": TRITON_ARCHS,  # kernels/triton/quant_act.py
    "grouped_linear": TRITON_ARCHS,  # kernels/triton/linear.py
    "hc_coeffs": TRITON_ARCHS,  # kernels/triton/mhc.py
    "hc_collapse": TRITON_ARCHS,  # kernels/triton/mhc.py
    "hc_expand": TRITON_ARCHS,  # kernels/triton/mhc.py
    "hc_expand_norm": TRITON_ARCHS,  # kernels/triton/mhc_norm.py
    "index_scores": TRITON_ARCHS,  # kernels/triton/indexer.py
    "index_key_records": TRITON_ARCHS,  # kernels/triton/cache_write.py
    "index_scores_paged": TRITON_ARCHS,  # kernels/triton/indexer.py
    "linear": TRITON_ARCHS,  # kernels/triton/linear.py
    "linear_quant_act": TRITON_ARCHS,  # kernels/triton/gemm_fp8.py
    "moe_routed_experts": TRITON_ARCHS,  # kernels/triton/moe_experts.py
    "pack_window_kv": TRITON_ARCHS,  # kernels/triton/records.py
    "rms_norm": TRITON_ARCHS,  # kernels/triton/norm.py
    "rms_norm_q8": TRITON_ARCHS,  # kernels/triton/norm.py
    "route_sqrtsoftplus": TRITON_ARCHS,  # kernels/triton/moe_routing.py
    "select_candidate_blocks": TRITON_ARCHS,  # kernels/triton/topk.py
    "sparse_attention_sink": TRITON_ARCHS,  # kernels/triton/attention.py
    "sparse_attention_sink_records": TRITON_ARCHS,  # kernels/triton/attention.py
    "topk_positions": TRITON_ARCHS,  # kernels/triton/topk.py
    "unpack_compressed_kv": TRITON_ARCHS,  # kernels/triton/records.py
    "unpack_index_key": TRITON_ARCHS,  # kernels/triton/records.py
    "unpack_window_kv": TRITON_ARCHS,  # kernels/triton/records.py
    "window_kv_records": TRITON_ARCHS,  # kernels/triton/cache_write.py
    "write_window_kv": TRITON_ARCHS,  # kernels/triton/cache_write.py
}


def plan_kernel_choice(spec: ModelSpec, topo: Topology) -> dict:
    """Returns ``{"backend_by_op": {op: backend}, "source_by_op": {op: "cpu" |
    "static_table" | "fallback"}, "device", "sm_arch", "warnings": [...]}``, ops sorted.
    ``spec`` is accepted for the pipeline's uniform signature (no op depends on it yet)."""
    hw = topo.hardware
    on_gpu = hw.device != "cpu" and hw.sm_arch > 0
    backend_by_op: dict[str, str] = {}
    source_by_op: dict[str, str] = {}
    fallbacks = []
    for op in registry.ops():
        if not on_gpu:
            backend_by_op[op], source_by_op[op] = REFERENCE, "cpu"
        elif hw.sm_arch in TRITON_CAPABILITIES.get(op, ()):
            backend_by_op[op], source_by_op[op] = TRITON, "static_table"
        else:
            backend_by_op[op], source_by_op[op] = REFERENCE, "fallback"
            fallbacks.append(op)
    warnings = [f"kernel op '{op}' has no triton kernel for sm_arch {hw.sm_arch}; it runs the "
                "torch reference on the GPU (slow, not wrong)" for op in fallbacks]
    return {
        "backend_by_op": backend_by_op,
        "source_by_op": source_by_op,
        "device": hw.device,
        "sm_arch": hw.sm_arch,
        "warnings": warnings,
    }
