"""The shared expert on the dense projection kernels (kernels/triton/shared_expert.py), under
the interpreter, against ``reference.moe.expert_ffn`` on the same ``Fp8BlockWeight``s.

Both compute the same exact products (Q8_32 x times FP8 weight values) with fp32 sums and the
same casts. fp32 activations: rel. L2 1e-6 against the reference (summation order only). bf16
activations: the interpreter's bf16 casts truncate instead of rounding (docs/kernels.md §3.2:
1.5-3e-2 from the reference for both Triton paths), so the oracle there is the grouped 1-expert
path (``moe_experts.expert_ffn`` on CPU, what the shared expert ran before): 1e-3 (equal
under the interpreter today). Rows 5 take the FP8 path (codes + scales), 70 the bf16 path
(Q8_32 values; >= BF16_DECODE_MIN_ROWS).
"""

import pytest
import torch

pytest.importorskip("triton")

from deepinfer.kernels.reference import moe  # noqa: E402
from deepinfer.kernels.triton import linear, moe_experts, shared_expert  # noqa: E402
from tests.kernels.test_quantized import WEIGHT_RANGE, random_fp8_weight  # noqa: E402


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("rows", [5, 70])
@pytest.mark.parametrize("routed", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shared_expert_matches_the_reference(rows, routed, dtype):
    assert (rows < linear.BF16_DECODE_MIN_ROWS) == (rows == 5)
    g = torch.Generator().manual_seed(rows)
    dim, inter = 128, 96
    x = torch.randn(rows, dim, generator=g).to(dtype)
    w1, w3 = (random_fp8_weight(inter, dim, s, WEIGHT_RANGE) for s in (1, 2))
    w2 = random_fp8_weight(dim, inter, 3, WEIGHT_RANGE)
    rw = torch.rand(rows, generator=g) if routed else None
    assert shared_expert.applies(x, w1, w3, w2)
    out = shared_expert.shared_expert_ffn(x, w1, w3, w2, 7.0, rw)
    ref = moe.expert_ffn(x, w1, w3, w2, 7.0, rw)
    assert out.dtype == dtype and out.shape == ref.shape
    if dtype == torch.float32:
        assert _rel(out, ref) < 1e-6
    else:
        assert _rel(out, moe_experts.expert_ffn(x, w1, w3, w2, 7.0, rw)) < 1e-3


def test_applies_only_to_fp8_weights_and_the_row_cap(monkeypatch):
    w = random_fp8_weight(64, 64, 0)
    x = torch.zeros(4097, 64, dtype=torch.bfloat16)
    assert shared_expert.applies(x, w, w, w)  # prefill sizes too (no cap by default)
    monkeypatch.setattr(shared_expert, "MAX_ROWS", 8)  # bench/kernel_overrides.py's A/B cap
    assert not shared_expert.applies(x[:9], w, w, w)
    assert shared_expert.applies(x[:3], w, w, w)
    assert not shared_expert.applies(x[:0], w, w, w)
    assert not shared_expert.applies(x[:3], torch.zeros(64, 64), w, w)  # not FP8 blocks


def test_swiglu_fake_q8_is_the_dequantized_codes():
    from deepinfer.kernels.reference import quant
    from deepinfer.kernels.triton import moe_swiglu

    g = torch.Generator().manual_seed(4)
    gg, uu = ((torch.randn(9, 128, generator=g) * 4).to(torch.bfloat16) for _ in range(2))
    rw = torch.rand(9, generator=g)
    codes, scales = moe_swiglu.swiglu_q8(gg, uu, rw, 7.0, torch.bfloat16)
    fake = moe_swiglu.swiglu_fake_q8(gg, uu, rw, 7.0, torch.bfloat16)
    want = quant.dequant_fp8_ue8m0(codes.view(torch.float8_e4m3fn), scales)
    assert fake.dtype == torch.bfloat16 and torch.equal(fake.float(), want.float())


@pytest.mark.parametrize("rows", [5, 70])
def test_rounded_input_gives_the_same_bits(rows):
    """``x_rounded`` with the Q8_32 values of x: the bf16 path (70 rows) reads them as they
    are, the FP8 path (5 rows) quantizes them (the same codes' values): x's bits either way."""
    from deepinfer.kernels.triton import quant_act

    g = torch.Generator().manual_seed(rows + 1)
    dim, inter = 128, 96
    x = torch.randn(rows, dim, generator=g)
    w1, w3 = (random_fp8_weight(inter, dim, s, WEIGHT_RANGE) for s in (4, 5))
    w2 = random_fp8_weight(dim, inter, 6, WEIGHT_RANGE)
    xq = quant_act.fake_quant_fp8_block32(x)
    assert torch.equal(shared_expert.shared_expert_ffn(xq, w1, w3, w2, 7.0, x_rounded=True),
                       shared_expert.shared_expert_ffn(x, w1, w3, w2, 7.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_gate_up_is_one_gemm_with_the_same_bits(dtype, monkeypatch):
    """Gate and up weights in one tensor (``quantized.stacked_rows``, as ``Expert.pack_gate_up``
    leaves them): from ``PACKED_MIN_ROWS`` rows one GEMM of 2I outputs, g and u its halves —
    the separate weights' output bit for bit; below the threshold two GEMMs."""
    from deepinfer.kernels.quantized import Fp8BlockWeight, stacked_rows

    g = torch.Generator().manual_seed(7)
    dim, inter, rows = 128, 96, 70
    x = torch.randn(rows, dim, generator=g).to(dtype)
    w1, w3 = (random_fp8_weight(inter, dim, s, WEIGHT_RANGE) for s in (8, 9))
    w2 = random_fp8_weight(dim, inter, 10, WEIGHT_RANGE)
    codes = torch.cat([w.codes.view(torch.uint8) for w in (w1, w3)]).view(w1.codes.dtype)
    scale = torch.cat([w.scale.view(torch.uint8) for w in (w1, w3)]).view(w1.scale.dtype)
    p1, p3 = (Fp8BlockWeight(codes[:inter], scale[:inter // 32]),
              Fp8BlockWeight(codes[inter:], scale[inter // 32:]))
    assert stacked_rows(p1, p3) is not None
    calls = []
    real = linear.linear
    monkeypatch.setattr(linear, "linear", lambda x_, w, *a, **k: calls.append(
        w.codes.shape[0]) or real(x_, w, *a, **k))
    want = shared_expert.shared_expert_ffn(x, w1, w3, w2, 7.0)  # separate tensors
    assert calls == [inter, inter, dim]
    monkeypatch.setattr(shared_expert, "PACKED_MIN_ROWS", rows)
    calls.clear()
    got = shared_expert.shared_expert_ffn(x, p1, p3, w2, 7.0)
    assert calls == [2 * inter, dim] and torch.equal(got, want)
    monkeypatch.setattr(shared_expert, "PACKED_MIN_ROWS", rows + 1)
    calls.clear()
    assert torch.equal(shared_expert.shared_expert_ffn(x, p1, p3, w2, 7.0), want)
    assert calls == [inter, inter, dim]
