"""The plan's kernel choice (``kernels.backend_by_op``) -> the ``KernelSet`` the model calls.

  Step 1  Triton: when the plan names ``triton`` for any op, register the Triton backend
          (``kernels.triton.register_triton_backend``). Refused, with a PlanError naming
          ``kernels.backend_by_op.<op>``, when the device is not CUDA, triton does not import, or
          the op has no Triton kernel here.
  Step 2  Every recorded (op, backend) resolves, or a PlanError names the field.
  Step 3  Shapes, once at load: each non-reference op's ``supports()`` is asked with the specs of
          every call the model makes (``model_call_specs``: the shapes are fixed by the ModelSpec;
          only token counts vary, and no predicate reads them). An op rejected for some call
          runs the reference for all its calls: a warning at load names the op and the
          rejected spec, and every such call is counted (``PlannedKernels.fallback_calls``,
          in the engine stats as ``kernel_fallback_calls``).

Why at load and not per call: the plan stays the one source of the choice (the runtime only
narrows a ``triton`` entry to the reference where the kernel cannot take the model's shapes,
never the reverse), the choice is the same for every step (a decode step can be captured as a
CUDA graph), and no Python predicate runs per op call.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.artifacts.plan_schema import PlanError
from deepinfer.kernels import registry
from deepinfer.kernels.registry import REFERENCE, KernelNotFound, KernelSet

__all__ = ["EXPERT_ORDER_ENV", "PlannedKernels", "expert_byte_order", "expert_word_order",
           "model_call_specs", "planned_kernels"]

TRITON = "triton"
FIELD = "kernels.backend_by_op"
EXPERT_STACK_OPS = ("moe_routed_experts", "expert_ffn")
"""The ops that read the routed-expert stacks: the fused op over the whole stacks, and
``expert_ffn`` over one slot's views (the EP exchange path, ``runtime/model/moe.py``)."""


class PlannedKernels(KernelSet):
    """The plan's backend per op, with the load-time reference fallbacks counted per call.

    Attributes:
        fallbacks: op -> why the plan's ``triton`` entry runs the reference instead.
        fallback_calls: op -> calls that ran the reference because of that (live counts).
    """

    def __init__(self, choice: dict[str, str], fallbacks: dict[str, str] | None = None):
        super().__init__(choice)
        self.fallbacks = dict(fallbacks or {})
        self.fallback_calls = dict.fromkeys(self.fallbacks, 0)
        for op in self.fallbacks:
            self._cache[op] = self._counted(op, registry.resolve(op, REFERENCE))

    def backend_of(self, op: str) -> str:
        return REFERENCE if op in self.fallbacks else super().backend_of(op)

    def _counted(self, op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.fallback_calls[op] += 1
            return fn(*args, **kwargs)

        return call


def planned_kernels(choice: dict[str, str], spec: ModelSpec, device: str | torch.device,
                    source: str = "plan.json", max_model_len: int | None = None
                    ) -> PlannedKernels:
    """Steps 1-3 of the module docstring for ``choice`` (the plan's ``backend_by_op``)."""
    device = torch.device(device)
    triton_ops = sorted(op for op, backend in choice.items() if backend == TRITON)
    if triton_ops:
        _register_triton(triton_ops, device, source)
    for op, backend in sorted(choice.items()):  # Step 2
        try:
            registry.resolve(op, backend)
        except KernelNotFound as exc:
            raise PlanError(source, f"{FIELD}.{op}", str(exc)) from None
    fallbacks: dict[str, str] = {}
    kernel_ops = sorted(op for op, backend in choice.items() if backend != REFERENCE)
    call_specs = model_call_specs(spec, device, max_model_len) if kernel_ops else {}
    for op in kernel_ops:  # Step 3
        for call in call_specs.get(op, call_specs["*"]):
            if not registry.backend_supports(op, choice[op], call):
                fallbacks[op] = f"its {choice[op]} supports() rejects the model's call {call}"
                break
    for op, why in fallbacks.items():
        warnings.warn(f"{source}: {FIELD}.{op} is {choice[op]} but {why}; that op runs the torch "
                      "reference (counted in the engine stats as kernel_fallback_calls)",
                      stacklevel=2)
    return PlannedKernels(choice, fallbacks)


def expert_word_order(kernels: KernelSet, device: str | torch.device,
                      capability: tuple[int, int] | None = None) -> bool:
    """Whether the routed-expert stacks are held in MXFP4 word order
    (``ExpertSlots.word_order``, ``kernels/mxfp4_word_order.py``), decided once at load.

    Yes exactly when every op that reads the stacks (``EXPERT_STACK_OPS``) runs the Triton
    expert kernels — the plan's choice after the load-time fallbacks (``backend_of``) — on a
    CUDA device of compute capability 9 or more (``capability``: the device's, unless given).
    Those kernels unpack word-order bytes with rotations instead of byte permutes (W_WORDS):
    expert GEMMs 2.134 -> 2.050 ms at 64 tokens, 3.393 -> 3.286 at 256, 13.0 -> 12.45 at 4096
    on the H200, bit-identical results. Everywhere else (CPU plans, reference fallbacks) the
    stacks keep the checkpoint's order: the reference would have to convert each expert back
    on every call (exact, only slower). Decided here, beside the backend choice it follows,
    rather than in the plan: it is a resident layout of the backend, not a planned value, and
    it changes no result.
    """
    device = torch.device(device)
    if device.type != "cuda" or any(kernels.backend_of(op) != TRITON for op in EXPERT_STACK_OPS):
        return False  # (the device is asked only after this: reference plans never touch it)
    if capability is None:
        capability = torch.cuda.get_device_capability(device)
    return capability[0] >= 9


EXPERT_ORDER_ENV = "DI_EXPERT_ORDER"  # "words": opt out of the W4A8 Gluon expert layout


def expert_byte_order(kernels: KernelSet, device: str | torch.device,
                      capability: tuple[int, int] | None = None,
                      environ: Mapping[str, str] = os.environ,
                      k_sizes: tuple[int, ...] = ()) -> str:
    """The routed-expert stacks' byte order (``ExpertSlots.byte_order``), decided once at load:
    "checkpoint" where ``expert_word_order`` says no; else "w4a8" on an SM90 GPU where
    triton's Gluon imports and every expert GEMM's K (``k_sizes``: hidden and expert width) is
    a multiple of 128 (the layout's step; each GEMM's O is the other's K, so its step tiles of
    128 rows fit too) — the layout of ``kernels/triton/moe_gluon_w4a8.py``
    (decode) and ``moe_gluon_w4a16_prefill.py`` (prefill): in the engine, 64 x 4K decode 20.8
    -> 16.1 ms per step and the 4K prefill 169.1 -> 153.1 ms against word order (session 11,
    rounds 40b and 42a, with the since-removed FP8 prefill kernel); else "words".
    ``DI_EXPERT_ORDER=words`` keeps word order (the Triton tiles everywhere), ``w4a8`` asks for
    the default. Raises PlanError (a user error naming the variable) on any other value of
    it."""
    choice = environ.get(EXPERT_ORDER_ENV, "")
    if choice not in ("", "words", "w4a8"):
        raise PlanError("the environment", EXPERT_ORDER_ENV,
                        f"got {choice!r}, expected 'w4a8', 'words' or unset")
    if not expert_word_order(kernels, device, capability):
        return "checkpoint"
    if choice != "words":
        from deepinfer.kernels.triton.moe_gluon import HAS_GLUON
        if capability is None:
            capability = torch.cuda.get_device_capability(torch.device(device))
        if HAS_GLUON and capability[0] == 9 and all(k % 128 == 0 for k in k_sizes):
            return "w4a8"
    return "words"


def _register_triton(ops: list[str], device: torch.device, source: str) -> None:
    field = f"{FIELD}.{ops[0]}"
    if device.type != "cuda":
        raise PlanError(source, field,
                        f"{len(ops)} op(s) ({', '.join(ops)}) are recorded as triton, which "
                        f"needs a CUDA device, but the plan's device is {device.type}; compile "
                        "the plan for this machine (topology hardware.device: cpu)")
    from deepinfer.kernels import triton as triton_backend

    if not triton_backend.HAS_TRITON:
        raise PlanError(source, field,
                        f"{len(ops)} op(s) are recorded as triton but triton does not import in "
                        "this process; install triton or recompile the plan")
    registered = set(triton_backend.register_triton_backend())
    missing = [op for op in ops if op not in registered]
    if missing:
        raise PlanError(source, f"{FIELD}.{missing[0]}",
                        f"recorded as triton but kernels/triton registers no kernel for "
                        f"{', '.join(missing)}; recompile the plan with this deepinfer")


def model_call_specs(spec: ModelSpec, device: str | torch.device,
                     max_model_len: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """The spec dict of every distinct call the model makes, per op (``"*"``: the common part,
    for ops called with it alone). Keys are those the ``supports()`` predicates read."""
    device = torch.device(device)
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else (0, 0)
    ratios = sorted({spec.layers[s].compress_ratio for s in spec.kv_source_layer_ids})
    max_len = max_model_len or spec.max_position_embeddings
    base: dict[str, Any] = {
        "device": device.type, "capability": capability, "cc_major": capability[0],
        "dtype": torch.bfloat16, "hidden_size": spec.hidden_size, "hc_mult": spec.hc_mult,
        "head_dim": spec.head_dim, "rope_dim": spec.qk_rope_head_dim,
        "index_head_dim": spec.index_head_dim, "index_n_heads": spec.index_n_heads,
        "index_topk": spec.index_topk, "candidate_topk_blocks": spec.candidate_topk_blocks,
        "candidate_block_size": spec.candidate_block_size,
        "num_entries": max_len // min(ratios, default=1),
        "n_routed_experts": spec.n_routed_experts,
        "moe_intermediate_size": spec.moe_intermediate_size,
        # as stored in memory (kernels/quantized.py containers, which the wrappers take)
        "weight_format": "fp8_block32", "expert_format": "mxfp4",
    }
    n_ids = (spec.engram_max_ngram_size - 1) * spec.engram_n_heads
    gemm_in = sorted({spec.hidden_size, spec.q_lora_rank, spec.o_groups * spec.o_lora_rank,
                      spec.moe_intermediate_size, n_ids * spec.engram_head_dim})
    specs = {"*": [base]}
    # Q8_32 GEMMs (attention, indexer wq_b, experts, engram wkv) and the quantizer's dims.
    specs["linear_quant_act"] = [{**base, "in_features": i} for i in gemm_in]
    specs["fake_quant_fp8_block32"] = [{**base, "dim": d} for d in (*gemm_in, spec.head_dim)]
    specs["compress_pool"] = [{**base, "compress_ratio": r} for r in ratios if r > 1] or [base]
    specs["index_key_records"] = [{**base, "head_dim": spec.index_head_dim}]
    return specs
