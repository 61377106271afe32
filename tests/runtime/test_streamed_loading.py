"""Streamed rank loading (``runtime/shard_loader.py`` step 3) and device-side synthetic weights.

The oracle is the in-memory path the loader used before streaming, rebuilt here: every source
tensor of the rank made at once on the host (the old synthetic sampler, or every shard's tensors
read together), scales checked, then one ``load_state_dict(assign=True)``. The streamed loader
must give the same state dict bit for bit, make one unit (a weight and its scale) at a time, and
keep no expert tensor alive once it is copied into its stack.
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import pytest
import torch
from plan_helpers import dp2_checkpoint_plan, tiny_plans

from deepinfer.artifacts.model_spec import load_model_spec
from deepinfer.artifacts.weight_names import KIND_FP8_ROWS, SCALE_KINDS, expected_tensors
from deepinfer.kernels.formats import quantize_fp4_weight, quantize_fp8_rows, quantize_fp8_weight
from deepinfer.runtime import shard_loader
from deepinfer.runtime.model_loader import build_model
from deepinfer.runtime.shard_loader import load_rank_model, rank_bytes, rank_shard
from deepinfer.runtime.weights import shards as shards_module
from deepinfer.runtime.weights import synthetic as synthetic_module
from deepinfer.runtime.weights.shards import INDEX_FILE
from deepinfer.runtime.weights.synthetic import (
    check_synthetic_size,
    device_fit_problem,
    synthetic_tensors,
    tensor_seed,
)


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    return tiny_plans(tmp_path_factory)


@pytest.fixture(scope="module")
def ckpt_plan(tmp_path_factory):
    """The dp2-ep2 topology over a written checkpoint (seed 0)."""
    return dp2_checkpoint_plan(tmp_path_factory.mktemp("ckpt"))[0]


# ---- the old in-memory path (the oracle) ------------------------------------------------------
_OLD_QUANTIZERS = {"fp8": quantize_fp8_weight, "fp4": quantize_fp4_weight,
                   "fp8_rows": quantize_fp8_rows}


def old_synthetic(specs, seed):
    """``synthetic_tensors`` as it was: a CPU ``torch.Generator()`` per tensor, one randn."""
    out = {}
    for t in specs:
        if t.name in out or t.kind in SCALE_KINDS:
            continue
        if t.kind in _OLD_QUANTIZERS:
            mean, std = 0.0, (1.0 if t.kind == KIND_FP8_ROWS else 0.02)
        else:
            mean, std = next((m, s) for pattern, m, s in synthetic_module._VALUE_RULES
                             if pattern.search(t.name))
        g = torch.Generator().manual_seed(tensor_seed(seed, t.name))
        x = torch.randn(t.logical_shape, generator=g, dtype=torch.float32) * std + mean
        if t.kind in _OLD_QUANTIZERS:
            out[t.name], out[t.scale_name] = _OLD_QUANTIZERS[t.kind](x)
        else:
            out[t.name] = x.to(t.dtype)
    return out


def old_state(plan, rank, seed=0):
    """The rank's state dict by the pre-streaming path: all sources on the host, one load."""
    shard = rank_shard(plan, rank)
    placement = plan.plan["expert_placement"][plan.plan["weight_shards"]["expert_phase"]]
    net = build_model(plan.spec)
    for block in net.layers:
        layer = block.attn.layer.layer_id
        block.ffn.set_slots(shard.slot_offset, shard.slot_logical[layer],
                            placement["log2phy"][layer], placement["logcnt"][layer], None)
    if plan.model_path.startswith("builtin:"):
        stored = old_synthetic(shard.sources.values(), seed)
    else:
        ckpt = Path(plan.model_path)
        weight_map = json.loads((ckpt / INDEX_FILE).read_text())["weight_map"]
        by_shard = {}
        for name in shard.sources:
            by_shard.setdefault(weight_map[name], []).append(name)
        stored = {}
        for file, names in by_shard.items():
            stored.update(shards_module.load_tensors(ckpt / file, names))
    state = {}
    for target, src in shard.targets.items():
        state[target] = stored[src]
        scale_name = shard.sources[src].scale_name
        if scale_name is not None:
            state[target.removesuffix(".weight") + ".scale"] = stored[scale_name]
    net.load_state_dict(state, strict=True, assign=True)
    return net.state_dict()


def bits(t: torch.Tensor) -> torch.Tensor:
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(ints[t.element_size()])


def assert_bit_identical(got, want):
    assert list(got) == list(want)
    for name, t in got.items():
        w = want[name]
        assert (t.dtype, t.shape, t.device) == (w.dtype, w.shape, w.device), name
        assert torch.equal(bits(t), bits(w)), name


# ---- streamed == in-memory --------------------------------------------------------------------
@pytest.mark.parametrize("plan_name,rank", [("tiny-cpu", 0), ("tiny-cpu-dp2-ep2", 1)])
def test_streamed_synthetic_is_bit_identical_to_in_memory(plans, plan_name, rank):
    plan = plans[plan_name]
    assert_bit_identical(load_rank_model(plan, rank, device="cpu").model.state_dict(),
                         old_state(plan, rank))


def test_streamed_checkpoint_is_bit_identical_to_in_memory(ckpt_plan, monkeypatch):
    monkeypatch.setattr(shard_loader, "READ_BATCH_BYTES", 4096)  # several batches per shard
    for rank in (0, 1):
        assert_bit_identical(load_rank_model(ckpt_plan, rank).model.state_dict(),
                             old_state(ckpt_plan, rank))


# ---- never the whole rank at once -------------------------------------------------------------
def _track(produced: list, tensors: dict[str, torch.Tensor]) -> None:
    for name, t in tensors.items():
        if ".ffn.experts." in name:
            produced.append(weakref.ref(t))


def test_synthetic_units_are_made_one_at_a_time(plans, monkeypatch):
    """Each producer call makes one unit (weight + scale), and every expert tensor made before
    is gone by then (copied into its stack, no reference left)."""
    produced: list[weakref.ref] = []
    live_at_call: list[int] = []
    sizes: list[int] = []

    def producer(specs, seed, device="cpu"):
        specs = list(specs)
        live_at_call.append(sum(r() is not None for r in produced))
        out = synthetic_tensors(specs, seed, device)
        sizes.append(len(out))
        _track(produced, out)
        return out

    monkeypatch.setattr(shard_loader, "synthetic_tensors", producer)
    plan = plans["tiny-cpu-dp2-ep2"]
    model = load_rank_model(plan, 1).model
    shard = rank_shard(plan, 1)
    assert len(sizes) == len(set(shard.targets.values()))  # one call per source weight
    assert max(sizes) <= 2 and max(live_at_call) == 0
    assert produced and all(r() is None for r in produced)
    assert not any(t.is_meta for t in model.state_dict().values())


def test_checkpoint_reads_are_batched_and_dropped(ckpt_plan, monkeypatch):
    """With a batch limit below one tensor, every read is one unit, and no expert tensor read
    before is alive when the next read starts."""
    read = shards_module.load_tensors
    produced: list[weakref.ref] = []
    live_at_call: list[int] = []
    sizes: list[int] = []

    def reader(path, names):
        live_at_call.append(sum(r() is not None for r in produced))
        out = read(path, names)
        sizes.append(len(out))
        _track(produced, out)
        return out

    monkeypatch.setattr(shard_loader, "READ_BATCH_BYTES", 1)
    monkeypatch.setattr(shards_module, "load_tensors", reader)
    load_rank_model(ckpt_plan, 0)
    assert max(sizes) <= 2 and max(live_at_call) == 0
    assert produced and all(r() is None for r in produced)


# ---- device memory -----------------------------------------------------------------------------
def test_device_fit_problem_names_the_numbers():
    assert device_fit_problem(10, 10, "cuda:0", "rank 0 of m") is None
    msg = device_fit_problem(68_291_060_512, 60 << 30, "cuda:0", "rank 0 of builtin:x")
    assert "rank 0 of builtin:x" in msg and "cuda:0" in msg
    assert "68.3 GB" in msg and "64.4 GB" in msg


def test_cuda_request_above_free_memory_is_refused(plans, monkeypatch):
    """Refused before anything is allocated on the device (no CUDA needed: mem_get_info is
    mocked, and nothing else touches the device before the check)."""
    plan = plans["tiny-cpu"]
    need = rank_bytes(rank_shard(plan, 0))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (need - 1, 1 << 40))
    with pytest.raises(ValueError) as err:
        load_rank_model(plan, 0, device="cuda:0")
    msg = str(err.value)
    assert "rank 0 of builtin:tiny" in msg and "hidden_size" in msg and "cuda:0" in msg
    assert f"{need / 1e9:.1f} GB" in msg


def test_host_cap_applies_only_on_the_host(monkeypatch):
    monkeypatch.setattr(synthetic_module, "MAX_SYNTHETIC_BYTES", 1000)
    with pytest.raises(ValueError, match=r"refusing to synthesize .* on the host"):
        check_synthetic_size(1001, "cpu", "rank 0 of m")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 40, 1 << 41))
    check_synthetic_size(1 << 39, "cuda:0", "rank 0 of m")  # fits the device: no host cap


# ---- synthetic values ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def table():
    return expected_tensors(load_model_spec("builtin:tiny"), include_dspark=False)


NAMES = ("embed.weight", "layers.0.hc_attn_fn", "layers.0.attn.wq_a.weight",
         "layers.0.ffn.experts.3.w2.weight", "layers.1.engram.embed.weight",
         "layers.0.attn_norm.weight", "layers.2.ffn.gate.bias")


def test_cpu_synthetic_values_are_unchanged(table):
    specs = [table[n] for n in NAMES]
    got, want = synthetic_tensors(specs, seed=7), old_synthetic(specs, seed=7)
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and torch.equal(bits(got[name]),
                                                                   bits(want[name])), name


@pytest.mark.parametrize("name", ["layers.0.attn.wq_a.weight", "layers.0.ffn.experts.3.w2.weight",
                                  "layers.1.engram.embed.weight", "embed.weight"])
def test_row_chunks_assemble_like_one_sample(table, name):
    """The accelerator's chunked sampling (run here on the CPU): chunk k is the k-th randn draw
    of the tensor's generator, stored in place — equal to storing the concatenated draws."""
    t = table[name]
    rows, chunk = t.logical_shape[0], 32
    got = synthetic_module._chunked(
        t, torch.Generator().manual_seed(5), torch.device("cpu"), chunk)
    g = torch.Generator().manual_seed(5)
    draws = [synthetic_module._sample(t, g, (min(chunk, rows - r), *t.logical_shape[1:]),
                                      torch.device("cpu")) for r in range(0, rows, chunk)]
    assert len(draws) > 1
    want = synthetic_module._stored(t, torch.cat(draws))
    assert list(got) == list(want)
    for n in want:
        assert got[n].shape == want[n].shape and torch.equal(bits(got[n]), bits(want[n])), n
