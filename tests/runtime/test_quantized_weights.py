"""Weights resident as the checkpoint stores them (FP8 codes + tile scales, MXFP4 expert stacks,
FP8 engram rows), against the fully dequantized bf16 model.

Oracles: the bf16 model built the old way (``runtime.weights.synthetic_weights``: every
quantized tensor dequantized by ``runtime/weights/dequant.py`` at load) and the plan's
``weight_shards.weight_bytes_per_rank``. Tolerance: exact. Dequantization is exact, so the ops
that dequantize on the fly see the same operands and must give the same logits bit for bit.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from deepinfer.artifacts.model_spec import load_model_spec
from deepinfer.artifacts.plan_dir import write_plan
from deepinfer.artifacts.weight_names import KIND_FP4, KIND_FP8, KIND_FP8_ROWS, SCALE_KINDS
from deepinfer.kernels.quantized import Fp8BlockWeight, Fp8Rows, Mxfp4ExpertWeights
from deepinfer.planner.compile import compile_plan
from deepinfer.planner.passes.shard_map import weight_summary
from deepinfer.planner.report import render_report
from deepinfer.planner.topology_schema import load_topology
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.cache import SequenceCache
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41
from deepinfer.runtime.model.moe import MoE
from deepinfer.runtime.model.params import model_bytes
from deepinfer.runtime.model_loader import load_model
from deepinfer.runtime.plan_loader import load_runtime_plan
from deepinfer.runtime.shard_loader import load_rank_model
from deepinfer.runtime.weights import (
    CheckpointError,
    synthetic_checkpoint_tensors,
    synthetic_stored_tensors,
    synthetic_weights,
    write_checkpoint,
)
from deepinfer.runtime.weights.dequant import dequantize_tensors
from deepinfer.runtime.weights.reader import wanted_tensors
from deepinfer.runtime.weights.shards import INDEX_FILE


@pytest.fixture(scope="module")
def spec():
    return load_model_spec("builtin:tiny")


@pytest.fixture(scope="module")
def quantized():
    return load_model("builtin:tiny", "synthetic", seed=0)


@pytest.fixture(scope="module")
def dequantized(spec) -> DeepseekV41:
    """The old path: every checkpoint tensor dequantized to bf16 at load."""
    with torch.device("meta"):
        net = DeepseekV41(spec)
    net.load_weights(synthetic_weights(spec, seed=0))
    return net


def test_weights_are_resident_as_stored(spec, quantized):
    state = quantized.model.state_dict()
    stored = synthetic_stored_tensors(spec, seed=0)
    assert state.keys() == stored.keys()
    for name, t in wanted_tensors(spec, include_dspark=False).items():
        held, want = state[name], stored[name]
        if t.kind == KIND_FP4:  # stacked per layer as uint8 bytes (the checkpoint's int8 bits)
            assert held.dtype == torch.uint8 and torch.equal(held, want.view(torch.uint8)), name
        else:
            assert held.dtype == t.dtype and held.shape == t.shape, name
            assert torch.equal(held.view(torch.uint8), want.view(torch.uint8)), name
    block = quantized.model.layers[1]
    assert isinstance(block.attn.wq_a.weight, Fp8BlockWeight)
    assert isinstance(block.attn.wo_a.weight, Fp8BlockWeight)  # FP8, no input quantization
    assert isinstance(block.ffn.shared_experts.w2.weight, Fp8BlockWeight)
    assert isinstance(block.ffn.experts.w1, Mxfp4ExpertWeights)
    assert isinstance(block.engram.embed.weight, Fp8Rows)
    full = next(b for b in quantized.model.layers if b.attn.layer.owns_compressor)
    assert full.attn.compressor.wkv.weight.dtype == torch.bfloat16  # stored bf16
    assert not any(p.dtype == torch.bfloat16 and p.dim() == 3  # no bf16 expert stacks
                   for p in quantized.model.parameters())


def test_logits_equal_the_dequantized_model_bit_for_bit(spec, quantized, dequantized):
    """Two sequences, chunked prefill (past the window and several compressed groups), then
    decode steps: every forward's logits equal."""
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 500, (n,), generator=g).tolist() for n in (29, 17)]
    caches = {id(m): [SequenceCache.empty(spec) for _ in prompts]
              for m in (quantized.model, dequantized)}
    steps = [[p[:11] for p in prompts], [p[11:] for p in prompts], [[7], [9]], [[11], [13]]]
    for chunk in steps:
        got = quantized.model(ForwardBatch.build(chunk, caches[id(quantized.model)]))
        want = dequantized(ForwardBatch.build(chunk, caches[id(dequantized)]))
        assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("seed", [1, 2])
def test_containers_dequantize_like_the_checkpoint_reader(spec, seed):
    """On a random checkpoint (random code and scale bytes, DSpark included), every quantized
    tensor's container gives dequant.py's bf16 bits."""
    g = torch.Generator().manual_seed(seed)
    table = synthetic_checkpoint_tensors(spec, seed=seed)
    specs = list(wanted_tensors(spec, include_dspark=True).values())
    for t in specs:
        if t.kind in SCALE_KINDS:  # ue8m0 bytes 3..246: every exponent exact in bf16
            table[t.name] = torch.randint(3, 247, t.shape, dtype=torch.uint8,
                                          generator=g).view(torch.float8_e8m0fnu)
        elif t.kind in (KIND_FP8, KIND_FP8_ROWS):  # any e4m3 byte but NaN
            codes = torch.randint(0, 255, t.shape, dtype=torch.uint8, generator=g)
            table[t.name] = torch.where((codes & 0x7F) == 0x7F, codes - 1,
                                        codes).view(torch.float8_e4m3fn)
        elif t.kind == KIND_FP4:
            table[t.name] = torch.randint(0, 256, t.shape, dtype=torch.uint8,
                                          generator=g).view(torch.int8)
    want = dequantize_tensors(table, specs)
    checked = 0
    for t in specs:
        if t.kind not in (KIND_FP8, KIND_FP4, KIND_FP8_ROWS):
            continue
        codes, scale = table[t.name], table[t.scale_name]
        if t.kind == KIND_FP8:
            got = Fp8BlockWeight(codes, scale).dequantize()
        elif t.kind == KIND_FP4:
            got = Mxfp4ExpertWeights(codes[None], scale[None]).dequantize()[0]
        else:
            got = Fp8Rows(codes, scale).dequantize()
        assert got.dtype == want[t.name].dtype == torch.bfloat16, t.name
        assert torch.equal(got.view(torch.int16), want[t.name].view(torch.int16)), t.name
        checked += 1
    assert checked > 100


def _compile(tmp_path, topology: str):
    p = compile_plan(load_topology(topology))
    write_plan(tmp_path / "plan", p, render_report(p), force=False)
    return load_runtime_plan(tmp_path / "plan")


def test_resident_bytes_equal_the_plans_weight_bytes(quantized, tmp_path_factory):
    """Exactly equal: the plan counts on-disk bytes (codes, packed FP4, one byte per ue8m0
    scale, bf16/f32 tensors) and the model holds those bytes. Neither counts the non-weight
    tables (RoPE frequencies, engram token map and hash constants)."""
    single = _compile(tmp_path_factory.mktemp("single"), "builtin:tiny-cpu")
    assert quantized.model_bytes() == single.plan["weight_shards"]["weight_bytes_per_rank"][0]
    ep = _compile(tmp_path_factory.mktemp("ep"), "builtin:tiny-cpu-dp2-ep2")
    for rank, planned in enumerate(ep.plan["weight_shards"]["weight_bytes_per_rank"]):
        assert load_rank_model(ep, rank).model_bytes() == planned


def test_released_slice_experts_are_resident_in_fp4():
    """One layer of the released dimensions (384 experts, D 5120, I 2304), built on the meta
    device (shapes only): the routed experts take the checkpoint's 6.72 GiB, not bf16's 27."""
    spec = load_model_spec("builtin:v41-flash-slice")
    with torch.device("meta"):
        moe = MoE(spec.hidden_size, spec.moe_intermediate_size, spec.n_routed_experts,
                  spec.num_experts_per_tok, spec.routed_scaling_factor, spec.gate_temp,
                  spec.norm_topk_prob, spec.swiglu_limit)
    expert_bytes = model_bytes(moe.experts)
    assert expert_bytes == spec.n_routed_experts * weight_summary(spec).expert_bytes[0]
    assert 6.70 < expert_bytes / 2**30 < 6.75
    bf16_bytes = spec.n_routed_experts * 3 * spec.hidden_size * spec.moe_intermediate_size * 2
    assert expert_bytes < bf16_bytes / 3.7  # 4 bits + one ue8m0 byte per 32 values


def test_corrupt_scale_is_refused_naming_the_tensor(tmp_path):
    ckpt = write_checkpoint("builtin:tiny", tmp_path / "ckpt", seed=0)
    name = "layers.2.attn.wq_b.scale"
    shard = json.loads((ckpt / INDEX_FILE).read_text())["weight_map"][name]
    tensors = load_file(str(ckpt / shard))
    bad = tensors[name].view(torch.uint8).clone()
    bad[0, 0] = 255
    tensors[name] = bad.view(torch.float8_e8m0fnu)
    save_file(tensors, str(ckpt / shard))
    with pytest.raises(CheckpointError, match=r"layers\.2\.attn\.wq_b\.weight: scale byte 255"):
        load_model(str(ckpt))
