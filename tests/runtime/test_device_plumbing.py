"""Device plumbing and kernel-backend wiring, on a machine without CUDA.

Whether an engine step creates a tensor on the wrong device needs a GPU (tests/gpu/
test_model_gpu.py). Here: the helpers of runtime/device.py; that ``to_device`` and the cache
pool move *every* tensor (checked with the meta device, which any tensor left behind on the
CPU would betray); the batch's host bookkeeping; the plan's kernel choice -> KernelSet (Triton
refused with a PlanError naming ``kernels.backend_by_op``, load-time fallbacks counted); and
``LLM`` refusing plans it cannot run here.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from deepinfer.artifacts.model_spec import load_model_spec
from deepinfer.artifacts.plan_dir import write_plan
from deepinfer.artifacts.plan_schema import PlanError
from deepinfer.kernels import registry
from deepinfer.planner.compile import compile_plan
from deepinfer.planner.report import render_report
from deepinfer.planner.topology_schema import load_topology
from deepinfer.runtime import kernel_backends
from deepinfer.runtime.cache_pool import CachePool
from deepinfer.runtime.device import plan_device, sampling_columns, to_device
from deepinfer.runtime.engine_stats import EngineStats
from deepinfer.runtime.kernel_backends import PlannedKernels, model_call_specs, planned_kernels
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.cache import SequenceCache
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41
from deepinfer.runtime.model_loader import load_model

CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def spec():
    return load_model_spec("builtin:tiny")


@pytest.fixture(scope="module")
def cpu_plan():
    return compile_plan(load_topology("builtin:tiny-cpu"))


def write(tmp_path, plan):
    return write_plan(tmp_path / "plan", plan, render_report(plan))


# ---- runtime/device.py -------------------------------------------------------------------------
def test_plan_device():
    assert plan_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        plan_device("h200")


def test_to_device_and_sampling_columns_keep_values_and_dtypes():
    a = np.arange(6, dtype=np.int64).reshape(2, 3)[:, ::2]  # not contiguous
    t = to_device(a, "cpu")
    assert t.dtype == torch.int64 and t.tolist() == [[0, 2], [3, 5]]
    assert to_device(np.arange(3, dtype=np.int32), "cpu", torch.int64).dtype == torch.int64
    floats, ints = sampling_columns(
        [np.array([0.5, 1.0], np.float32), np.array([0.9, 1], np.float32)],
        [np.array([3, 4], np.int32), np.array([2**40, 7])], "cpu")
    assert [f.dtype for f in floats] == [torch.float32] * 2
    assert [i.dtype for i in ints] == [torch.int64] * 2
    assert floats[1].tolist() == pytest.approx([0.9, 1.0]) and ints[1].tolist() == [2**40, 7]
    empty_f, empty_i = sampling_columns([np.zeros(0, np.float32)], [np.zeros(0, np.int64)], "cpu")
    assert empty_f[0].shape == (0,) and empty_i[0].shape == (0,)


# ---- everything moves ---------------------------------------------------------------------------
def test_model_to_device_moves_every_tensor(spec):
    model = load_model("builtin:tiny", "synthetic", seed=0).model
    assert model.device == torch.device("cpu")
    model.to_device("meta")
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    assert "token_map" in tensors and any(n.endswith("inv_freq") for n in tensors)
    assert {n for n, t in tensors.items() if not t.is_meta} == set()
    h = model.engram_hash
    assert h.primes.is_meta and h.offsets.is_meta and h.multipliers.is_meta


def test_cache_pool_and_views_live_on_the_pool_device(spec):
    pool = CachePool(spec, num_blocks=4, num_state_slots=3, block_size_tokens=4, device="meta")
    pools = [pool.window, *pool.entries.values(), *pool.index_keys.values(),
             *pool.partial_kv.values(), *pool.partial_gate.values(), pool.engram_history]
    assert all(t.is_meta for t in pools) and pool.device == torch.device("meta")
    view = pool.view(torch.tensor([1, 2]), slot=1, num_tokens=0)  # a host table is moved
    assert view.block_table.is_meta and view.block_table.dtype == torch.int64
    cache = SequenceCache.empty(spec, "meta")
    assert all(t.is_meta for t in (*cache.window, *cache.compressed.values(),
                                   *cache.partial_kv.values(), cache.engram_history))


def test_batch_keeps_its_bookkeeping_on_the_host(spec):
    caches = [SequenceCache.empty(spec), SequenceCache.empty(spec)]
    caches[1].num_tokens = 5
    batch = ForwardBatch.build([[7, 8, 9], [4]], caches)
    assert batch.device == torch.device("cpu")
    assert batch.starts == [0, 3] and batch.start_positions == [0, 5]
    assert batch.id_range == (4, 9) and batch.last_rows.tolist() == [2, 3]
    assert batch.positions.tolist() == [0, 1, 2, 5] and batch.rows(1) == slice(3, 4)


def test_model_refuses_a_batch_on_another_device(spec):
    with torch.device("meta"):
        model = DeepseekV41(spec)
    batch = ForwardBatch.build([[3]], [SequenceCache.empty(spec)])
    with pytest.raises(ValueError, match="the batch is on cpu but the model on meta"):
        model(batch)


# ---- the plan's kernel choice -> KernelSet ------------------------------------------------------
def test_triton_on_a_cpu_device_is_refused_naming_the_field(spec):
    with pytest.raises(PlanError) as err:
        planned_kernels({"rms_norm": "triton", "linear": "reference"}, spec, "cpu", "p.json")
    assert err.value.field == "kernels.backend_by_op.rms_norm"
    assert "needs a CUDA device" in str(err.value)


def test_triton_missing_or_without_the_op_is_refused(spec, monkeypatch):
    from deepinfer.kernels import triton as triton_backend

    monkeypatch.setattr(triton_backend, "HAS_TRITON", False)
    with pytest.raises(PlanError, match="triton does not import") as err:
        planned_kernels({"rms_norm": "triton"}, spec, torch.device("cuda"))
    assert err.value.field == "kernels.backend_by_op.rms_norm"
    monkeypatch.setattr(triton_backend, "HAS_TRITON", True)
    monkeypatch.setattr(triton_backend, "register_triton_backend", lambda: ["rms_norm"])
    with pytest.raises(PlanError, match="registers no kernel for hc_expand") as err:
        planned_kernels({"rms_norm": "triton", "hc_expand": "triton"}, spec, torch.device("cuda"))
    assert err.value.field == "kernels.backend_by_op.hc_expand"


def test_unknown_backend_or_op_is_refused(spec):
    with pytest.raises(PlanError, match="no 'tilelang' backend") as err:
        planned_kernels({"rms_norm": "tilelang"}, spec, "cpu")
    assert err.value.field == "kernels.backend_by_op.rms_norm"
    with pytest.raises(PlanError, match="not registered"):
        planned_kernels({"no_such_op": "reference"}, spec, "cpu")


@pytest.fixture
def scratch_registry():
    """Registrations made by a test are removed afterwards (the registry is process-wide)."""
    saved = {op: dict(regs) for op, regs in registry._REGISTRY.items()}
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


def test_unsupported_model_shapes_fall_back_to_the_reference_counted(spec, scratch_registry):
    """A backend whose supports() rejects one of the model's GEMM widths (192: the engram wkv
    input of builtin:tiny) runs the reference for that op, and every call is counted."""
    calls = []

    def fake_linear_quant_act(x, w):
        calls.append(x.shape)
        return registry.resolve("linear_quant_act")(x, w)

    registry.register("linear_quant_act", "fakegpu", fake_linear_quant_act,
                      supports=lambda s: s.get("in_features", 32) != 192)
    registry.register("rms_norm", "fakegpu", registry.resolve("rms_norm"), supports=lambda s: True)
    with pytest.warns(UserWarning, match="linear_quant_act is fakegpu but its fakegpu supports"):
        k = planned_kernels({"linear_quant_act": "fakegpu", "rms_norm": "fakegpu"}, spec, "cpu")
    assert set(k.fallbacks) == {"linear_quant_act"} and "192" in k.fallbacks["linear_quant_act"]
    assert k.backend_of("linear_quant_act") == "reference" and k.backend_of("rms_norm") == "fakegpu"
    x, w = torch.randn(2, 64).to(torch.bfloat16), torch.randn(8, 64).to(torch.bfloat16)
    assert torch.equal(k.linear_quant_act(x, w), registry.resolve("linear_quant_act")(x, w))
    k.linear_quant_act(x, w)
    assert k.fallback_calls == {"linear_quant_act": 2} and calls == []
    stats = EngineStats(kernel_fallback_calls=k.fallback_calls)
    assert stats.summary()["kernel_fallback_calls"] == {"linear_quant_act": 2}
    assert "kernel_fallback_calls" not in EngineStats().summary()


def test_model_call_specs_cover_every_gemm_width(spec):
    specs = model_call_specs(spec, "cpu", 4096)
    widths = {s["in_features"] for s in specs["linear_quant_act"]}
    assert widths == {256, 64, 192}  # hidden, q_lora / o_groups * o_lora / experts, engram
    assert specs["*"][0]["device"] == "cpu"
    assert specs["*"][0]["num_entries"] == 4096  # max_model_len / the smallest source ratio, 1
    assert {s["compress_ratio"] for s in specs["compress_pool"]} == {2}


def test_planned_kernels_for_a_reference_plan_is_the_plain_choice(spec, cpu_plan):
    choice = cpu_plan["kernels"]["backend_by_op"]
    k = planned_kernels(choice, spec, "cpu")
    assert isinstance(k, PlannedKernels) and k.fallbacks == {}
    assert k.rms_norm is registry.resolve("rms_norm")
    assert kernel_backends.FIELD == "kernels.backend_by_op"


# ---- LLM ----------------------------------------------------------------------------------------
def test_llm_refuses_a_triton_entry_without_cuda(tmp_path, cpu_plan):
    from deepinfer.runtime import LLM

    plan = copy.deepcopy(cpu_plan)
    plan["kernels"]["backend_by_op"]["hc_expand"] = "triton"
    with pytest.raises(PlanError) as err:
        LLM(write(tmp_path, plan))
    assert err.value.field == "kernels.backend_by_op.hc_expand"
    assert "needs a CUDA device" in str(err.value) and "plan.json" in str(err.value)


@pytest.mark.skipif(CUDA, reason="checks the refusal on a machine without CUDA")
def test_llm_refuses_a_gpu_plan_without_cuda(tmp_path):
    from deepinfer.runtime import LLM

    plan = compile_plan(load_topology("tests/gpu/tiny-h200.yaml"))
    assert "triton" in plan["kernels"]["backend_by_op"].values()
    with pytest.raises(PlanError) as err:
        LLM(write(tmp_path, plan))
    assert err.value.field == "topology.hardware.device"
    assert "no CUDA device" in str(err.value)


# ---- the batched, sync-free engram hashing ------------------------------------------------------
def test_batched_engram_hash_equals_per_sequence_hashing(spec):
    """``DeepseekV41._hash_ids`` (all sequences at once, no device read-back) against
    ``compressed_context`` + ``engram_hash_ids`` per sequence, with histories, an image span
    and chunks of 1..9 tokens; the histories advance the same way."""
    from deepinfer.runtime.model.engram_hash import compressed_context, engram_hash_ids

    model = load_model("builtin:tiny", "synthetic", seed=0).model
    g = torch.Generator().manual_seed(2)
    chunks = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (9, 1, 4, 2)]
    caches = [SequenceCache.empty(spec) for _ in chunks]
    for c in caches[1:3]:
        c.engram_history = torch.randint(-1, 512, c.engram_history.shape, generator=g)
    masks = [[False] * len(c) for c in chunks]
    masks[0][3:6] = [True] * 3
    expected, histories = [], []
    for c, cache, m in zip(chunks, caches, masks, strict=True):
        ctx, hist = compressed_context(model.token_map, torch.tensor([c]),
                                       cache.engram_history[None], torch.tensor([m]))
        expected.append(engram_hash_ids(ctx, model.engram_hash)[0])
        histories.append(hist[0])
    got = model._hash_ids(ForwardBatch.build(chunks, caches, masks))
    assert torch.equal(got, torch.cat(expected))
    for cache, hist in zip(caches, histories, strict=True):
        assert torch.equal(cache.engram_history, hist)
