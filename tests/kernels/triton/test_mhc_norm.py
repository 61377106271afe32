"""The fused expand + next-site collapse + RMSNorm (kernels/triton/mhc_norm.py) against its
reference and against the three separate Triton kernels it replaces.

Tolerances as test_gemm_side_mhc_engram_norm.py: fp32 rel 1e-6 (S or D fp32 terms); fp16
outputs a rounding step apart (rel 1e-3). bf16 is not run under the interpreter (its bf16
casts are not the GPU's); tests/gpu/test_mhc_norm_gpu.py runs it on the H200.
"""

import pytest
import torch

triton = pytest.importorskip("triton")

from deepinfer.kernels.reference import mhc  # noqa: E402
from deepinfer.kernels.reference import norm as ref_norm  # noqa: E402
from deepinfer.kernels.reference import quant as ref_quant  # noqa: E402
from deepinfer.kernels.triton import mhc as tri_mhc  # noqa: E402
from deepinfer.kernels.triton import mhc_norm, quant_act  # noqa: E402
from deepinfer.kernels.triton import norm as tri_norm  # noqa: E402


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def _inputs(num_tokens: int, dim: int, dtype: torch.dtype, seed: int, s: int = 4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_tokens, s, dim, generator=g).to(dtype)
    out = (torch.randn(num_tokens, dim, generator=g) * 3).to(dtype)
    post = torch.rand(num_tokens, s, generator=g) * 2
    comb = torch.rand(num_tokens, s, s, generator=g)
    pre = torch.rand(num_tokens, s, generator=g) + 1e-6
    weight = torch.randn(dim, generator=g).to(torch.bfloat16)
    return out, x, post, comb, pre, weight


def test_reference_is_the_separate_ops():
    """The reference op is exactly expand, then collapse, then RMSNorm (then Q8_32), bit for
    bit."""
    out, x, post, comb, pre, weight = _inputs(6, 96, torch.bfloat16, 0)
    y, h, hq = mhc.hc_expand_norm(out, x, post, comb, pre, weight, 1e-20, quant=True)
    want_y = mhc.hc_expand(out, x, post, comb)
    want_h = ref_norm.rms_norm(mhc.hc_collapse(want_y, pre), weight, 1e-20)
    assert torch.equal(y, want_y) and torch.equal(h, want_h)
    assert torch.equal(hq, ref_quant.fake_quant_fp8_block32(want_h))
    assert mhc.hc_expand_norm(out, x, post, comb, pre, weight, 1e-20)[2] is None


# D: one partial chunk (96 -> BLOCK_D 128), whole chunks (1024), a masked last chunk (1120)
@pytest.mark.parametrize("dim", [96, 1024, 1120])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_against_reference(dtype, dim):
    args = _inputs(5, dim, dtype, 1)
    y, h, hq = mhc_norm.hc_expand_norm(*args, 1e-20, quant=True)
    ry, rh, rq = mhc.hc_expand_norm(*args, 1e-20, quant=True)
    tol = 1e-6 if dtype == torch.float32 else 1e-3
    assert y.dtype == h.dtype == hq.dtype == dtype
    assert y.shape == ry.shape and h.shape == rh.shape == hq.shape
    assert _rel(y, ry) < tol and _rel(h, rh) < tol
    # hq: the Q8_32 values of the kernel's own h, bit for bit (a pure function of each group)
    assert torch.equal(hq, ref_quant.fake_quant_fp8_block32(h))
    assert _rel(hq, rq) < 0.1  # Q8_32 steps (3 mantissa bits) where h's last bits differ
    assert mhc_norm.hc_expand_norm(*args, 1e-20)[2] is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_streams_are_the_expand_kernels_bits(dtype):
    """y is the expand kernel's own output (the same code, ``mhc.expand_stream``), and h is the
    separate collapse + norm kernels' h up to the statistic's summation order (<= 1 rounding
    of h's dtype)."""
    args = _inputs(7, 1120, dtype, 2)
    out, x, post, comb, pre, weight = args
    y, h, hq = mhc_norm.hc_expand_norm(*args, 1e-20, quant=True)
    assert torch.equal(y, tri_mhc.hc_expand(out, x, post, comb))
    h3 = tri_norm.rms_norm(tri_mhc.hc_collapse(y, pre), weight, 1e-20)
    ulp = torch.finfo(dtype).eps
    assert ((h.double() - h3.double()).abs() <= ulp * h3.double().abs() + 1e-30).all()
    assert torch.equal(hq, quant_act.fake_quant_fp8_block32(h))  # the quantizer kernel's bits


def test_rows_do_not_depend_on_the_batch():
    """A token's y and h are the same bits alone, in a batch, or at another batch position."""
    args = _inputs(9, 1120, torch.float32, 3)
    y, h, hq = mhc_norm.hc_expand_norm(*args, 1e-20, quant=True)
    for rows in (slice(4, 5), slice(2, 9), slice(0, 1)):
        part = [a[rows] for a in args[:5]] + [args[5]]
        py, ph, pq = mhc_norm.hc_expand_norm(*part, 1e-20, quant=True)
        assert torch.equal(py, y[rows]) and torch.equal(ph, h[rows]) and torch.equal(pq, hq[rows])


def test_no_tokens():
    args = _inputs(0, 64, torch.float32, 4)
    y, h, hq = mhc_norm.hc_expand_norm(*args, 1e-20, quant=True)
    assert y.shape == (0, 4, 64) and h.shape == hq.shape == (0, 64)


def test_shape_errors_name_the_shapes():
    out, x, post, comb, pre, weight = _inputs(3, 64, torch.float32, 5)
    with pytest.raises(AssertionError, match="weight"):
        mhc_norm.hc_expand_norm(out, x, post, comb, pre, weight[:32], 1e-20)
    out, x, post, comb, pre, weight = _inputs(3, 48, torch.float32, 5)
    with pytest.raises(AssertionError, match="D % 32"):
        mhc_norm.hc_expand_norm(out, x, post, comb, pre, weight, 1e-20, quant=True)


def test_sm90_compile(sm90_compile):
    cases = mhc_norm.aot_cases()
    for case in cases:
        case["no_spill"] = True
    results = sm90_compile(cases)
    assert all(r["stack"] in (None, 0) for r in results.values())


def test_any_width_without_quant():
    """D not a multiple of 32 (no Q8_32 then): the masked 32-column groups of the last chunk."""
    args = _inputs(3, 100, torch.float32, 6)
    y, h, hq = mhc_norm.hc_expand_norm(*args, 1e-20)
    ry, rh, _ = mhc.hc_expand_norm(*args, 1e-20)
    assert hq is None and _rel(y, ry) < 1e-6 and _rel(h, rh) < 1e-6


@pytest.mark.parametrize("streams", ["stride0", "distinct"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_stride0_streams_give_the_copys_bits(dtype, streams):
    """The first site's streams, all the embedding, as a stride-0 view, and distinct streams
    2D apart: y (stored contiguous), h and hq are the bits of the call on the contiguous
    copy."""
    out, x, post, comb, pre, weight = _inputs(5, 1120, dtype, 3)
    if streams == "stride0":
        view = x[:, :1].expand(-1, x.shape[1], -1)
        assert view.stride(1) == 0
    else:
        view = torch.cat([x, x.flip(1)], 2)[:, :, :1120]
        assert view.stride(1) == 2240
    got = mhc_norm.hc_expand_norm(out, view, post, comb, pre, weight, 1e-20, quant=True)
    want = mhc_norm.hc_expand_norm(out, view.contiguous(), post, comb, pre, weight, 1e-20,
                                   quant=True)
    assert got[0].is_contiguous()
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
