"""Model loading from a checkpoint directory and the engram token map."""

import pytest
import torch

from deepinfer.runtime.model_loader import engram_token_map, load_model
from deepinfer.runtime.weights import write_checkpoint


@pytest.fixture(scope="module")
def tiny():
    return load_model("builtin:tiny", "synthetic", seed=0)


def test_checkpoint_directory_loads_the_same_model(tiny, tmp_path):
    ckpt = write_checkpoint("builtin:tiny", tmp_path / "ckpt", seed=0)
    assert (ckpt / "tokenizer.json").is_file()
    lm = load_model(str(ckpt))
    got, want = lm.model.state_dict(), tiny.model.state_dict()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert torch.equal(lm.model.token_map, tiny.model.token_map)


def test_engram_token_map_is_identity_for_tiny_and_checked(tiny):
    assert torch.equal(engram_token_map(tiny.spec, tiny.tokenizer), torch.arange(512))
    bad = tiny.spec.__class__(**{**{f: getattr(tiny.spec, f) for f in
                                     tiny.spec.__dataclass_fields__},
                                 "engram_compressed_vocab_size": 400})
    with pytest.raises(ValueError, match="engram_compressed_vocab_size"):
        engram_token_map(bad, tiny.tokenizer)


def test_to_device_packs_each_shared_experts_gate_and_up_weights():
    """``to_device`` leaves every shared expert's w1 and w3 codes in one tensor and their
    scales in another (``Expert.pack_gate_up``; the kernels then run both as one GEMM at
    prefill rows): the same values, and packing twice is a no-op."""
    from deepinfer.kernels.quantized import stacked_rows

    net = load_model("builtin:tiny", "synthetic", seed=0).model
    experts = [block.ffn.shared_experts for block in net.layers]
    assert experts and all(e.w1.is_quantized for e in experts)
    before = [(e.w1.weight.dequantize(), e.w3.weight.dequantize()) for e in experts]
    assert all(stacked_rows(e.w1.weight, e.w3.weight) is None for e in experts)
    net.to_device("cpu")
    for e, (d1, d3) in zip(experts, before, strict=True):
        both = stacked_rows(e.w1.weight, e.w3.weight)
        assert both is not None
        assert torch.equal(both.dequantize(), torch.cat([d1, d3]))
        assert torch.equal(e.w1.weight.dequantize(), d1)
        assert torch.equal(e.w3.weight.dequantize(), d3)
        ptr = e.w1.weight.codes.data_ptr()
        e.pack_gate_up()
        assert e.w1.weight.codes.data_ptr() == ptr


def test_prefill_bf16_weights_twin_every_fp8_projection():
    """``add_prefill_bf16_weights``: every FP8 block projection holds its dequantized values as
    a bf16 twin (not in the state dict), the shared experts' gate and up twins packed like their
    codes; the bytes added are the planner's (``2 * dense_fp8_params``), and a second call adds
    nothing."""
    from deepinfer.kernels.quantized import Fp8BlockWeight, stacked_rows
    from deepinfer.planner.passes.shard_map import weight_summary
    from deepinfer.runtime.model.params import Linear

    lm = load_model("builtin:tiny", "synthetic", seed=0)
    net = lm.model.to_device("cpu")
    keys = set(net.state_dict())
    added = net.add_prefill_bf16_weights()
    assert added == 2 * weight_summary(lm.spec).dense_fp8_params > 0
    fp8 = [m for m in net.modules() if isinstance(m, Linear) and m.is_quantized]
    assert fp8 and all(isinstance(m.weight, Fp8BlockWeight) for m in fp8)
    for m in fp8:
        w = m.weight
        assert w.bf16 is not None and torch.equal(w.bf16, w.dequantize())
    for block in net.layers:
        e = block.ffn.shared_experts
        both = stacked_rows(e.w1.weight, e.w3.weight)
        assert both is not None and both.bf16 is not None
        assert torch.equal(both.bf16, both.dequantize())
    assert set(net.state_dict()) == keys
    assert net.add_prefill_bf16_weights() == 0


def test_quantized_weight_container_is_built_once_per_held_tensors():
    """``StoredWeight.weight``: the same container while the held tensors stay (the prefill
    asks ~10 a layer), a new one over the new tensors after a load, a twin or a packing."""
    from deepinfer.kernels.quantized import stacked_rows

    net = load_model("builtin:tiny", "synthetic", seed=0).model
    lin = net.layers[0].attn.wq_a
    first = lin.weight
    assert lin.weight is first and first.bf16 is None
    codes = first.codes.clone()
    lin.load_state_dict({"weight": codes, "scale": first.scale.clone()})
    reloaded = lin.weight
    assert reloaded is not first and reloaded.codes.data_ptr() == codes.data_ptr()
    assert torch.equal(reloaded.dequantize(), first.dequantize())
    assert lin.add_bf16_twin() > 0
    twinned = lin.weight
    assert twinned is not reloaded and torch.equal(twinned.bf16, reloaded.dequantize())
    assert lin.weight is twinned
    e = net.layers[0].ffn.shared_experts
    w1 = e.w1.weight
    assert stacked_rows(w1, e.w3.weight) is None  # apart: asked again, the same answer
    assert stacked_rows(w1, e.w3.weight) is None
    e.pack_gate_up()  # w1's codes become a view of the packed pair: a new container
    pair = stacked_rows(e.w1.weight, e.w3.weight)
    assert e.w1.weight is not w1 and pair is not None
    assert stacked_rows(e.w1.weight, e.w3.weight) is pair  # kept on w1's container
    assert torch.equal(e.w1.weight.dequantize(), w1.dequantize())
    assert torch.equal(pair.dequantize(), torch.cat([w1.dequantize(),
                                                     e.w3.weight.dequantize()]))
