"""MXFP4 word order on the torch side (kernels/mxfp4_word_order.py, no triton): the chunked
in-place conversion against the permutation bit by bit, and the consumers of
``Mxfp4ExpertWeights.word_order`` outside the Triton expert kernels (dequantize, dense, the
reference ops) giving exactly what the checkpoint-order container gives.

Oracle: the permutation applied one bit of one Python int at a time; the same container in
checkpoint order. Tolerance: exact (bit equality).
"""

import dataclasses
import subprocess
import sys

import pytest
import torch
from test_quantized import WEIGHT_RANGE, random_mxfp4, same_bits

from deepinfer.kernels import mxfp4_word_order
from deepinfer.kernels.mxfp4_word_order import from_word_order, to_word_order, word_bit_permutation
from deepinfer.kernels.quantized import Mxfp4ExpertWeights, dense
from deepinfer.kernels.reference import moe


def _words_by_bits(packed: torch.Tensor) -> list[int]:
    """Each 4-byte word of ``packed`` moved by ``word_bit_permutation``, bit by bit."""
    perm = word_bit_permutation()
    raw = packed.reshape(-1).view(torch.uint8).tolist()
    out = []
    for i in range(0, len(raw), 4):
        word = sum(b << (8 * a) for a, b in enumerate(raw[i:i + 4]))
        out.append(sum(((word >> src) & 1) << dst for src, dst in enumerate(perm)))
    return out


def _as_words(packed: torch.Tensor) -> list[int]:
    raw = packed.reshape(-1).view(torch.uint8).tolist()
    return [sum(b << (8 * a) for a, b in enumerate(raw[i:i + 4])) for i in range(0, len(raw), 4)]


@pytest.mark.parametrize("chunk_words", [1 << 22, 3])  # one chunk; chunks cut mid-row
def test_conversion_is_the_bit_permutation_in_chunks_and_in_place(monkeypatch, chunk_words):
    monkeypatch.setattr(mxfp4_word_order, "CHUNK_WORDS", chunk_words)
    packed = torch.randint(-128, 128, (2, 3, 16), dtype=torch.int8,
                           generator=torch.Generator().manual_seed(0))
    words = to_word_order(packed)
    assert words.dtype == torch.int8 and words.shape == packed.shape
    assert _as_words(words) == _words_by_bits(packed)
    assert not torch.equal(words, packed)
    assert torch.equal(from_word_order(words), packed)
    in_place = packed.clone()
    assert to_word_order(in_place, out=in_place) is in_place
    assert torch.equal(in_place, words)
    one_slot = packed.clone().view(torch.uint8)
    to_word_order(one_slot[1], out=one_slot[1])  # a slot of a stack, the others untouched
    assert torch.equal(one_slot[0], packed.view(torch.uint8)[0])
    assert torch.equal(one_slot[1], words.view(torch.uint8)[1])
    with pytest.raises(ValueError, match="whole 32-bit words"):
        to_word_order(torch.zeros(4, 6, dtype=torch.uint8))


def test_word_order_container_dequantizes_like_checkpoint_order():
    w = random_mxfp4(3, 40, 96, seed=2)
    words = dataclasses.replace(w, packed=to_word_order(w.packed), word_order=True)
    assert not torch.equal(words.packed, w.packed)
    assert same_bits(words.dequantize(), w.dequantize())
    assert torch.equal(words.checkpoint_packed(), w.packed)
    one = words.select(1)
    assert one.word_order and words.select(torch.tensor([2, 0])).word_order
    assert words.to("cpu").word_order
    assert same_bits(dense(one), dense(w.select(1)))
    int8 = Mxfp4ExpertWeights(words.packed.view(torch.int8), w.scale, word_order=True)
    assert same_bits(int8.dequantize(), w.dequantize())


def test_reference_ops_on_word_order_equal_checkpoint_order():
    g = torch.Generator().manual_seed(3)
    dim, inter, experts, topk, tokens = 64, 32, 5, 2, 9
    ws = [random_mxfp4(experts, inter, dim, 10, WEIGHT_RANGE),
          random_mxfp4(experts, inter, dim, 11, WEIGHT_RANGE),
          random_mxfp4(experts, dim, inter, 12, WEIGHT_RANGE)]
    words = [dataclasses.replace(w, packed=to_word_order(w.packed), word_order=True) for w in ws]
    x = torch.randn(tokens, dim, generator=g).bfloat16()
    ids = torch.rand(tokens, experts, generator=g).topk(topk, dim=1).indices
    route_w = torch.rand(tokens, topk, generator=g)
    want = moe.moe_routed_experts(x, ids, route_w, *ws, 10.0)
    assert torch.equal(moe.moe_routed_experts(x, ids, route_w, *words, 10.0), want)
    # a word-order container read as if it were checkpoint order gives other values
    flags_lost = [dataclasses.replace(w, word_order=False) for w in words]
    assert not torch.equal(moe.moe_routed_experts(x, ids, route_w, *flags_lost, 10.0), want)
    one = [w.select(3) for w in ws]
    assert torch.equal(moe.expert_ffn(x, *(w.select(3) for w in words), 10.0),
                       moe.expert_ffn(x, *one, 10.0))


def test_the_torch_side_imports_without_triton():
    """The containers, the reference ops and the runtime's expert stacks use word order without
    importing triton (kernels/triton/__init__.py: triton only at backend registration)."""
    code = ("import sys; import deepinfer.kernels.quantized, deepinfer.kernels.reference.moe, "
            "deepinfer.runtime.model.expert_slots; assert 'triton' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
