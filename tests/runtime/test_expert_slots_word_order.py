"""ExpertSlots in MXFP4 word order (``runtime/model/expert_slots.py``): every write path stores
word-order bytes (state dict, streamed slots, slot copies between orders, switching the mode),
the state dict gives checkpoint order back bit for bit, the ops give the same results on
word-order stacks as on checkpoint-order ones (reference; Triton under the interpreter), and
``kernel_backends.expert_word_order`` turns the mode on only for the Triton expert kernels on
an SM90+ GPU (the rank loader's stacks then hold word order, the model's results unchanged).
The W4A8 order (``kernels/mxfp4_w4a8_order.py``) through the same write paths, and
``expert_byte_order``'s choice (W4A8 by default on SM90 with Gluon; ``words`` opts out).

Oracle: the same module in checkpoint order; ``mxfp4_word_order.to_word_order`` of its bytes.
Tolerance: exact (bit equality).
"""

from __future__ import annotations

import pytest
import torch
from plan_helpers import tiny_plans

from deepinfer.kernels.mxfp4_word_order import to_word_order
from deepinfer.kernels.quantized import Mxfp4ExpertWeights
from deepinfer.kernels.reference import moe
from deepinfer.kernels.registry import REFERENCE, KernelSet
from deepinfer.runtime import shard_loader
from deepinfer.runtime.kernel_backends import EXPERT_STACK_OPS, PlannedKernels, expert_word_order
from deepinfer.runtime.model.expert_slots import PROJECTIONS, ExpertSlots

DIM, INTER, SLOTS, LIMIT = 64, 32, 4, 10.0
SHAPES = {"w1": (INTER, DIM), "w2": (DIM, INTER), "w3": (INTER, DIM)}


def _state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    """Checkpoint-form tensors of every slot: int8 packed [O, I/2] + ue8m0 bytes [O, I/32]."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for j in range(SLOTS):
        for w, (rows, cols) in SHAPES.items():
            sd[f"{j}.{w}.weight"] = torch.randint(-128, 128, (rows, cols // 2), dtype=torch.int8,
                                                  generator=g)
            sd[f"{j}.{w}.scale"] = torch.randint(116, 124, (rows, cols // 32), dtype=torch.uint8,
                                                 generator=g)
    return sd


def _loaded(word_order: bool, seed: int = 0) -> ExpertSlots:
    slots = ExpertSlots(SLOTS, DIM, INTER, word_order=word_order)
    slots.load_state_dict(_state_dict(seed))
    return slots


def _raw(slots: ExpertSlots, w: str) -> torch.Tensor:
    """The bytes a stack holds, as held."""
    return slots.stack(w).packed


def _assert_state_dicts_equal(got: dict, want: dict) -> None:
    """Same names, shapes and bytes (a loaded module holds uint8 / e8m0 views of int8 / uint8
    checkpoint tensors)."""
    assert sorted(got) == sorted(want)
    for name, t in got.items():
        assert torch.equal(t.view(torch.uint8), want[name].view(torch.uint8)), name


def test_state_dict_round_trip_is_bit_exact_and_the_stacks_hold_word_order():
    sd = _state_dict()
    words, plain = _loaded(True), _loaded(False)
    for w in PROJECTIONS:
        stack = words.stack(w)
        assert isinstance(stack, Mxfp4ExpertWeights) and stack.word_order
        assert not plain.stack(w).word_order
        assert torch.equal(_raw(words, w), to_word_order(_raw(plain, w)))
        assert not torch.equal(_raw(words, w), _raw(plain, w))
        assert words[2].w1.word_order  # a slot's views carry the order
    _assert_state_dicts_equal(words.state_dict(), plain.state_dict())
    for name, t in words.state_dict().items():  # the checkpoint's bytes
        assert torch.equal(t.view(torch.uint8), sd[name].view(torch.uint8)), name
    again = ExpertSlots(SLOTS, DIM, INTER, word_order=True)
    again.load_state_dict(words.state_dict())
    for w in PROJECTIONS:
        assert torch.equal(_raw(again, w), _raw(words, w))
    # keep_vars: the held views themselves (the loaders' meta check; no converted copies)
    held = words.state_dict(keep_vars=True)["1.w2.weight"]
    assert torch.equal(held, _raw(words, "w2")[1])


def test_streamed_slots_equal_the_state_dict_path():
    sd = _state_dict()
    streamed = ExpertSlots(SLOTS, DIM, INTER, word_order=True)
    streamed.allocate("cpu")
    assert streamed.word_order
    for j in range(SLOTS):
        for w in PROJECTIONS:
            streamed.load_slot(j, w, sd[f"{j}.{w}.weight"], sd[f"{j}.{w}.scale"])
    whole = _loaded(True)
    for w in PROJECTIONS:
        assert streamed.stack(w).word_order
        assert torch.equal(_raw(streamed, w), _raw(whole, w))
        assert torch.equal(streamed.stack(w).scale.view(torch.uint8),
                           whole.stack(w).scale.view(torch.uint8))
    assert sd["0.w1.weight"].dtype == torch.int8 and torch.equal(  # the source is untouched
        sd["0.w1.weight"], _state_dict()["0.w1.weight"])


@pytest.mark.parametrize("src_words,dst_words", [(False, True), (True, False), (True, True)])
def test_slot_copies_between_orders(src_words, dst_words):
    src, dst = _loaded(src_words, seed=1), _loaded(dst_words, seed=2)
    dst[0] = src[3]
    dst[2] = src[1]
    want = _state_dict(2)
    for j, e in ((0, 3), (2, 1)):
        for w in PROJECTIONS:
            want[f"{j}.{w}.weight"] = _state_dict(1)[f"{e}.{w}.weight"]
            want[f"{j}.{w}.scale"] = _state_dict(1)[f"{e}.{w}.scale"]
    _assert_state_dicts_equal(dst.state_dict(), want)
    checkpoint_order = ExpertSlots(SLOTS, DIM, INTER)
    checkpoint_order.load_state_dict(want)
    held = _raw(checkpoint_order, "w3")
    assert torch.equal(_raw(dst, "w3"), to_word_order(held) if dst_words else held)


def test_switching_the_mode_rearranges_what_is_held():
    slots = _loaded(False)
    slots.set_word_order(True)
    words = _loaded(True)
    for w in PROJECTIONS:
        assert torch.equal(_raw(slots, w), _raw(words, w))
    slots.set_word_order(False)
    _assert_state_dicts_equal(slots.state_dict(), _loaded(False).state_dict())
    for w in PROJECTIONS:
        assert torch.equal(_raw(slots, w), _raw(_loaded(False), w))


def _routing(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, DIM, generator=g).bfloat16()
    ids = torch.rand(tokens, SLOTS, generator=g).topk(2, dim=1).indices
    return x, ids, torch.rand(tokens, 2, generator=g)


def test_reference_ops_on_word_order_stacks_equal_checkpoint_order():
    x, ids, route_w = _routing(7, 3)
    words, plain = _loaded(True), _loaded(False)
    want = moe.moe_routed_experts(x, ids, route_w, plain.w1, plain.w3, plain.w2, LIMIT)
    assert torch.equal(moe.moe_routed_experts(x, ids, route_w, words.w1, words.w3, words.w2,
                                              LIMIT), want)
    slot, plain_slot = words[1], plain[1]
    assert torch.equal(moe.expert_ffn(x, slot.w1, slot.w3, slot.w2, LIMIT),
                       moe.expert_ffn(x, plain_slot.w1, plain_slot.w3, plain_slot.w2, LIMIT))


@pytest.mark.parametrize("tokens", [1, 6])
def test_triton_ops_on_word_order_stacks_equal_checkpoint_order(tokens):
    pytest.importorskip("triton")
    from deepinfer.kernels.triton import moe_experts  # interpreter (tests/conftest.py)

    x, ids, route_w = _routing(tokens, tokens)
    x = x.float()  # fp32 activations: the kernel within 1e-5 of the fp64 reference
    words, plain = _loaded(True), _loaded(False)
    want = moe_experts.moe_routed_experts(x, ids, route_w, plain.w1, plain.w3, plain.w2, LIMIT)
    got = moe_experts.moe_routed_experts(x, ids, route_w, words.w1, words.w3, words.w2, LIMIT)
    assert torch.equal(got, want)
    slot, plain_slot = words[2], plain[2]
    assert torch.equal(moe_experts.expert_ffn(x, slot.w1, slot.w3, slot.w2, LIMIT),
                       moe_experts.expert_ffn(x, plain_slot.w1, plain_slot.w3, plain_slot.w2,
                                              LIMIT))
    ref = moe.moe_routed_experts(x.double(), ids, route_w.double(), plain.w1, plain.w3,
                                 plain.w2, LIMIT)
    assert ((got.double() - ref).norm() / ref.norm()).item() < 1e-5  # the weights' values


def test_the_decision_is_word_order_only_for_triton_experts_on_sm90():
    triton = KernelSet(dict.fromkeys(EXPERT_STACK_OPS, "triton"))
    assert expert_word_order(triton, "cuda", capability=(9, 0))
    assert expert_word_order(triton, "cuda:1", capability=(10, 0))
    assert not expert_word_order(triton, "cuda", capability=(8, 9))  # Ampere / Ada
    assert not expert_word_order(triton, "cpu")
    assert not expert_word_order(KernelSet(), "cuda", capability=(9, 0))  # reference
    assert not expert_word_order(KernelSet(), "cuda:0")  # decided without asking the device
    one_op = KernelSet({"moe_routed_experts": "triton", "expert_ffn": REFERENCE})
    assert not expert_word_order(one_op, "cuda", capability=(9, 0))
    fallback = PlannedKernels(dict.fromkeys(EXPERT_STACK_OPS, "triton"),
                              {"moe_routed_experts": "its supports() rejects the model's call"})
    assert not expert_word_order(fallback, "cuda", capability=(9, 0))


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    return tiny_plans(tmp_path_factory)


def test_rank_loader_stacks_follow_the_decision_and_results_do_not_change(plans, monkeypatch):
    """The tiny plan on the CPU: checkpoint order; with the decision forced to word order the
    streamed stacks hold word order, and the state dict and the MoE outputs are unchanged."""
    plan = plans["tiny-cpu"]
    plain = shard_loader.load_rank_model(plan, 0).model
    assert not any(b.ffn.experts.word_order for b in plain.layers)
    seen = []

    def forced(kernels, device, **_):
        seen.append(torch.device(device).type)
        return "words"

    monkeypatch.setattr(shard_loader, "expert_byte_order", forced)
    words = shard_loader.load_rank_model(plan, 0).model
    assert seen == ["cpu"]
    assert all(b.ffn.experts.word_order for b in words.layers)
    _assert_state_dicts_equal(words.state_dict(), plain.state_dict())
    moe_w, moe_p = words.layers[1].ffn, plain.layers[1].ffn
    assert torch.equal(moe_w.experts.stack("w2").packed,
                       to_word_order(moe_p.experts.stack("w2").packed))
    x = torch.randn(11, moe_p.dim, generator=torch.Generator().manual_seed(4)).bfloat16()
    assert torch.equal(moe_w(words.kernels, x, None), moe_p(plain.kernels, x, None))


W8_DIM, W8_INTER = 128, 128  # the W4A8 order's step is 128 K


def _w4a8_state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = {"w1": (W8_INTER, W8_DIM), "w2": (W8_DIM, W8_INTER), "w3": (W8_INTER, W8_DIM)}
    return {f"{j}.{w}.{part}": (
        torch.randint(-128, 128, (rows, cols // 2), dtype=torch.int8, generator=g)
        if part == "weight" else
        torch.randint(116, 124, (rows, cols // 32), dtype=torch.uint8, generator=g))
        for j in range(SLOTS) for w, (rows, cols) in shapes.items() for part in ("weight", "scale")}


def test_w4a8_order_through_every_write_path():
    """Stacks in the W4A8 order hold ``to_w4a8_order`` of the checkpoint bytes after a state
    dict load, streamed slots, a slot copy from a word-order module and mode switches; the
    state dict and ``dequantize`` give the checkpoint's values back bit for bit."""
    from deepinfer.kernels.mxfp4_w4a8_order import to_w4a8_order

    sd = _w4a8_state_dict()
    plain = ExpertSlots(SLOTS, W8_DIM, W8_INTER)
    plain.load_state_dict(sd)
    w8 = ExpertSlots(SLOTS, W8_DIM, W8_INTER, byte_order="w4a8")
    w8.load_state_dict(sd)
    assert w8.byte_order == "w4a8" and not w8.word_order
    for w in PROJECTIONS:
        assert w8.stack(w).w4a8_order and not w8.stack(w).word_order
        assert torch.equal(_raw(w8, w), to_w4a8_order(_raw(plain, w)))
        assert torch.equal(w8.stack(w).dequantize(), plain.stack(w).dequantize())
    _assert_state_dicts_equal(w8.state_dict(), sd)
    streamed = ExpertSlots(SLOTS, W8_DIM, W8_INTER, byte_order="w4a8")
    streamed.allocate("cpu")
    for j in range(SLOTS):
        for w in PROJECTIONS:
            streamed.load_slot(j, w, sd[f"{j}.{w}.weight"], sd[f"{j}.{w}.scale"])
    words = ExpertSlots(SLOTS, W8_DIM, W8_INTER, word_order=True)
    words.load_state_dict(sd)
    copied = ExpertSlots(SLOTS, W8_DIM, W8_INTER, byte_order="w4a8")
    copied.allocate("cpu")
    for j in range(SLOTS):
        copied[j] = words[j]
    for w in PROJECTIONS:
        assert torch.equal(_raw(streamed, w), _raw(w8, w))
        assert torch.equal(_raw(copied, w), _raw(w8, w))
    for order in ("words", "checkpoint", "w4a8"):
        w8.set_byte_order(order)
        _assert_state_dicts_equal(w8.state_dict(), sd)
    with pytest.raises(ValueError, match="byte order 'bytes'"):
        w8.set_byte_order("bytes")


def test_w4a8_order_is_the_sm90_default_with_128_k(monkeypatch):
    from deepinfer.artifacts.plan_schema import PlanError
    from deepinfer.kernels.triton import moe_gluon
    from deepinfer.runtime.kernel_backends import expert_byte_order

    monkeypatch.setattr(moe_gluon, "HAS_GLUON", True)
    triton = KernelSet(dict.fromkeys(EXPERT_STACK_OPS, "triton"))
    opt_in = {"DI_EXPERT_ORDER": "w4a8"}
    k = (5120, 2304)
    assert expert_byte_order(triton, "cuda", (9, 0), {}, k) == "w4a8"  # the default
    assert expert_byte_order(triton, "cuda", (9, 0), opt_in, k) == "w4a8"
    assert expert_byte_order(triton, "cuda", (9, 0), {"DI_EXPERT_ORDER": "words"}, k) == "words"
    assert expert_byte_order(triton, "cuda", (9, 0), {}, (5120, 2304 + 64)) == "words"
    assert expert_byte_order(triton, "cuda", (10, 0), opt_in, k) == "words"  # SM90 only
    assert expert_byte_order(triton, "cuda", (9, 0), opt_in, (64, 32)) == "words"  # K % 128
    assert expert_byte_order(triton, "cpu", None, opt_in, k) == "checkpoint"
    assert expert_byte_order(KernelSet(), "cuda", (9, 0), opt_in, k) == "checkpoint"
    with pytest.raises(PlanError, match="DI_EXPERT_ORDER.*'yes'"):
        expert_byte_order(triton, "cuda", (9, 0), {"DI_EXPERT_ORDER": "yes"}, k)


def test_ops_on_w4a8_order_stacks():
    """W4A8-order stacks (the runtime's ``Mxfp4ExpertWeights``) give the checkpoint order's
    results: the reference ops bit for bit (they convert back), and the Triton op (interpreter:
    the folded tiles that read the order) bit for bit against checkpoint order on that tiling."""
    pytest.importorskip("triton")
    from deepinfer.kernels.triton import moe_experts

    sd = _w4a8_state_dict(1)
    plain = ExpertSlots(SLOTS, W8_DIM, W8_INTER)
    plain.load_state_dict(sd)
    w8 = ExpertSlots(SLOTS, W8_DIM, W8_INTER, byte_order="w4a8")
    w8.load_state_dict(sd)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, W8_DIM, generator=g)
    ids = torch.stack([torch.randperm(SLOTS, generator=g)[:2] for _ in range(5)])
    route_w = torch.rand(5, 2, generator=g)
    want = moe.moe_routed_experts(x, ids, route_w, plain.w1, plain.w3, plain.w2, LIMIT)
    assert torch.equal(moe.moe_routed_experts(x, ids, route_w, w8.w1, w8.w3, w8.w2, LIMIT), want)
    folded = {"SPLIT_K": False, "BK": 128, "DOWN": {"BK": 128}}
    want = moe_experts.run_experts(x, ids, route_w, plain.w1, plain.w3, plain.w2, LIMIT,
                                   config=folded)
    assert torch.equal(moe_experts.run_experts(x, ids, route_w, w8.w1, w8.w3, w8.w2, LIMIT),
                       want)
