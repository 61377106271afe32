"""MXFP4 weights in word order (kernels/triton/mxfp4_words.py): the re-arrangement is a lossless
bit permutation, its inline PTX (emulated on CPU, ``ptx_subset``) gives exactly e2m1 x 2^(e - 127)
in the registers the split tiles expect, and the expert kernels give the same results on
word-order weights as on checkpoint-order ones (interpreter: the tl twin)."""

import random
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

sys.path.insert(0, str(Path(__file__).parent))
from ptx_subset import bf16_to_float, run  # noqa: E402
from test_moe_unpack_ptx import _e2m1, _scale_bits  # noqa: E402

from deepinfer.kernels.quantized import Mxfp4ExpertWeights  # noqa: E402
from deepinfer.kernels.reference import moe  # noqa: E402
from deepinfer.kernels.triton import moe_experts, mxfp4_words  # noqa: E402


def test_word_order_is_a_lossless_bit_permutation():
    perm = mxfp4_words.word_bit_permutation()
    assert sorted(perm) == list(range(32))
    g = torch.Generator().manual_seed(0)
    packed = torch.randint(-128, 128, (3, 5, 64), dtype=torch.int8, generator=g)
    words = mxfp4_words.to_word_order(packed)
    assert words.dtype == packed.dtype and words.shape == packed.shape
    assert not torch.equal(words, packed)
    assert torch.equal(mxfp4_words.from_word_order(words), packed)


@pytest.mark.parametrize("inverse", [False, True])
def test_gpu_conversion_kernel_equals_the_torch_permutation(inverse):
    """``permute_words`` (the one-launch conversion CUDA tensors take; interpreter here) gives
    the torch loop's bytes, out of place and in place, for int8 and uint8 rows."""
    from deepinfer.kernels import mxfp4_word_order as wo

    perm = wo.word_bit_permutation()
    perm = wo._inverse(perm) if inverse else perm
    g = torch.Generator().manual_seed(5)
    packed = torch.randint(-128, 128, (2, 3, 1100), dtype=torch.int8, generator=g)  # > 1 block
    want = wo._permute_words(packed, perm)
    assert not torch.equal(want, packed)
    rotations = wo._rotations(perm)
    assert torch.equal(mxfp4_words.permute_words(packed, rotations, torch.empty_like(packed)),
                       want)
    in_place = packed.view(torch.uint8).clone()
    mxfp4_words.permute_words(in_place, rotations, in_place)
    assert torch.equal(in_place.view(torch.int8), want)


def _words_to_check(rng: random.Random) -> list[int]:
    """Every nibble value at every position (as 16-bit patterns repeated), plus random words."""
    words = []
    for nib in range(16):
        for pos in range(8):
            words.append((nib << (4 * pos)) | rng.getrandbits(32) & ~(0xF << (4 * pos)))
        words.append(int(f"{nib:x}" * 8, 16))
    return words + [rng.getrandbits(32) for _ in range(600)]


@pytest.mark.parametrize("one_mul,exponents", [(False, [0, 1, 100, 127, 128, 200, 254]),
                                               (True, [0, 1, 100, 120, 127, 128])])
def test_word_asm_matches_e2m1_times_scale(one_mul, exponents):
    asm = str(mxfp4_words.WORDS_TO_BF16_ONE_MUL.value if one_mul
              else mxfp4_words.WORDS_TO_BF16.value)
    rng = random.Random(1)
    for e in exponents:
        s = _scale_bits(e, one_mul)
        scale_pair = s | (s << 16)
        for original in _words_to_check(rng):
            packed = torch.tensor([(original >> (8 * a)) & 0xFF for a in range(4)],
                                  dtype=torch.uint8)
            word = mxfp4_words.to_word_order(packed)
            word = sum(int(b) << (8 * a) for a, b in enumerate(word.tolist()))
            out = run(asm, {4: word, 5: scale_pair, 6: scale_pair}, 4)
            halves = [(out[r] >> h) & 0xFFFF for r in range(4) for h in (0, 16)]
            even, odd = halves[:4], halves[4:]  # even[a]: K offset 2a, odd[a]: 2a + 1
            for a in range(4):
                byte = (original >> (8 * a)) & 0xFF
                for got, nib in ((even[a], byte & 15), (odd[a], byte >> 4)):
                    want = _e2m1(nib) * 2.0 ** (e - 127)
                    if abs(want) >= 2.0**128:
                        want = want * float("inf")
                    assert bf16_to_float(got) == want, (e, hex(original), a, nib, hex(got))


def _experts(num_experts, out_features, in_features, g):
    data = torch.randint(0, 256, (num_experts, out_features, in_features // 2), dtype=torch.uint8,
                         generator=g)
    scale = torch.randint(118, 124, (num_experts, out_features, in_features // 32),
                          dtype=torch.uint8, generator=g)
    return moe_experts.ExpertWeights(data.view(torch.int8), scale, "mxfp4")


@pytest.mark.parametrize("num_tokens", [1, 5])
def test_word_order_experts_equal_checkpoint_order(num_tokens):
    g = torch.Generator().manual_seed(num_tokens)
    dim, inter, num_experts, topk = 64, 64, 8, 2
    ws = [_experts(num_experts, inter, dim, g), _experts(num_experts, inter, dim, g),
          _experts(num_experts, dim, inter, g)]
    words = [moe_experts.mxfp4_to_word_order(w) for w in ws]
    x = torch.randn(num_tokens, dim, generator=g)
    ids = torch.rand(num_tokens, num_experts, generator=g).topk(topk, dim=1).indices
    route_w = torch.rand(num_tokens, topk, generator=g)
    out = moe_experts.run_experts(x, ids, route_w, *ws, 10.0)
    out_words = moe_experts.run_experts(x, ids, route_w, *words, 10.0)
    assert torch.equal(out_words, out)
    ref = moe.moe_routed_experts(x.double(), ids, route_w.double(),
                                 *(Mxfp4ExpertWeights(w.data, w.scale) for w in ws), 10.0)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5
    with pytest.raises(ValueError, match="word order"):
        moe_experts.run_experts(x, ids, route_w, words[0], ws[1], ws[2], 10.0)


def test_fp8_re_encoding_reads_word_order_back():
    """``mxfp4_to_fp8`` (another consumer of the packed bytes) gives the same codes from
    word-order weights as from checkpoint order."""
    w = _experts(3, 32, 64, torch.Generator().manual_seed(7))
    want = moe_experts.mxfp4_to_fp8(w)
    got = moe_experts.mxfp4_to_fp8(moe_experts.mxfp4_to_word_order(w))
    assert torch.equal(got.data.view(torch.uint8), want.data.view(torch.uint8))
    assert torch.equal(got.scale, want.scale) and not got.word_order
