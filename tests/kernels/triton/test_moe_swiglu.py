"""The slot-major SwiGLU (kernels/triton/moe_swiglu.py ``swiglu_fake_q8_slots``, interpreter)
against the two launches it replaces in the bf16 prefill expert pipeline: ``swiglu_fake_q8``
then ``gather_tokens`` — bit for bit, padding slots untouched; and its sm_90 compile."""

import pytest
import torch

triton = pytest.importorskip("triton")

from deepinfer.kernels.triton import moe_align, moe_swiglu  # noqa: E402
from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf  # noqa: E402


def _inputs(num_tokens: int, topk: int, inter: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    num_pairs = num_tokens * topk
    gg, uu = ((torch.randn(num_pairs, inter, generator=g) * 6).to(torch.bfloat16)
              for _ in range(2))
    gg[0, :32] = 0.0  # an all-zero group (the Q8_32 amax floor)
    uu[1, 64:96] *= 1e-3  # a group far smaller than the rest of its row
    rw = torch.rand(num_pairs, generator=g)
    ids = torch.randint(0, 16, (num_tokens, topk), generator=g)
    return gg, uu, rw, ids, num_pairs


@pytest.mark.parametrize("block_m", [16, 64])
@pytest.mark.parametrize("num_tokens,inter", [(5, 128), (37, 384), (1, 96)])
def test_slots_equal_swiglu_then_gather(num_tokens, inter, block_m):
    gg, uu, rw, ids, num_pairs = _inputs(num_tokens, 6, inter, num_tokens * inter + block_m)
    pairs, _ = moe_align.align_pairs(ids, 16, block_m)
    sentinel = torch.full((pairs.numel(), inter), 7.0, dtype=torch.bfloat16)
    h = moe_swiglu.swiglu_fake_q8(gg, uu, rw, 7.0, torch.bfloat16)
    want = pf.gather_tokens(h, pairs, num_pairs, 1, out=sentinel.clone())
    got = moe_swiglu.swiglu_fake_q8_slots(gg, uu, rw, 7.0, torch.bfloat16, pairs, num_pairs,
                                          out=sentinel.clone())
    assert (pairs >= num_pairs).any()  # padding slots present: left as the sentinel in both
    assert torch.equal(got, want)
    fresh = moe_swiglu.swiglu_fake_q8_slots(gg, uu, rw, 7.0, torch.bfloat16, pairs, num_pairs)
    live = pairs < num_pairs
    assert fresh.shape == want.shape and torch.equal(fresh[live], want[live])


def test_fp32_activations_round_as_the_two_launches():
    """An fp32 activation dtype: h rounded to fp32 (no bf16 step), its Q8_32 values in bf16 —
    still the gather of swiglu_fake_q8's h cast to bf16 (exact)."""
    gg, uu, rw, ids, num_pairs = _inputs(9, 6, 128, 11)
    gg, uu = gg.float() * 1.37, uu.float()
    pairs, _ = moe_align.align_pairs(ids, 16, 16)
    h = moe_swiglu.swiglu_fake_q8(gg, uu, rw, 10.0, torch.float32)
    want = pf.gather_tokens(h.to(torch.bfloat16), pairs, num_pairs, 1)
    got = moe_swiglu.swiglu_fake_q8_slots(gg, uu, rw, 10.0, torch.float32, pairs, num_pairs)
    live = pairs < num_pairs
    assert torch.equal(got[live], want[live])


def test_sm90_compile(sm90_compile):
    cases = moe_swiglu.aot_cases()
    assert len(cases) == 1
    sm90_compile(cases)


def test_no_route_weights_equal_weights_of_one():
    """route_w None (the shared expert: no ones tensor, no fill launch) gives the bits of an
    all-ones weight in both the codes and the Q8_32-values forms."""
    gg, uu, _, _, num_pairs = _inputs(7, 3, 256, 5)
    ones = torch.ones(num_pairs)
    for act in (torch.bfloat16, torch.float32):
        a, b = (gg.to(act), uu.to(act))
        assert torch.equal(moe_swiglu.swiglu_fake_q8(a, b, None, 7.0, act),
                           moe_swiglu.swiglu_fake_q8(a, b, ones, 7.0, act))
        for got, want in zip(moe_swiglu.swiglu_q8(a, b, None, 7.0, act),
                             moe_swiglu.swiglu_q8(a, b, ones, 7.0, act), strict=True):
            assert torch.equal(got, want)
