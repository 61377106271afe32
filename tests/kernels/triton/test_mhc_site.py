"""The site probe (kernels/triton/mhc_site.py): the fused expand + collapse + RMSNorm (+ Q8_32)
and the next site's coefficients from the same pass, against ``mhc.hc_expand_norm`` then
``mhc.hc_coeffs`` of its y (references), under the interpreter (fp32 "ieee" dots).

Tolerances as test_gemm_side_mhc_engram_norm.py: y / h rel 1e-6 (S or D fp32 terms), the
coefficients abs 2e-6 (fp32 dots over K = S * D and 20 Sinkhorn rounds).
"""

import pytest
import torch

triton = pytest.importorskip("triton")

from deepinfer.kernels.reference import mhc  # noqa: E402
from deepinfer.kernels.triton import mhc_site  # noqa: E402


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def _inputs(num_tokens: int, dim: int, seed: int, s: int = 4):
    g = torch.Generator().manual_seed(seed)
    out = torch.randn(num_tokens, dim, generator=g) * 3
    x = torch.randn(num_tokens, s, dim, generator=g)
    post = torch.rand(num_tokens, s, generator=g) * 2
    comb = torch.softmax(torch.randn(num_tokens, s, s, generator=g), -1)
    pre = torch.rand(num_tokens, s, generator=g) + 1e-6
    weight = torch.randn(dim, generator=g).to(torch.bfloat16)
    fn = torch.randn((2 + s) * s, s * dim, generator=g) * 0.05
    scale = torch.tensor([0.5, 0.7, 1.3])
    base = torch.randn((2 + s) * s, generator=g) * 0.3
    return (out, x, post, comb, pre, weight), (fn, scale, base)


@pytest.mark.parametrize("num_tokens", [5, 19])  # one partial token block; a whole one + part
def test_site_against_the_references(num_tokens):
    site, (fn, scale, base) = _inputs(num_tokens, 256, num_tokens)
    y, h, hq, (pre2, post2, comb2) = mhc_site.hc_site(*site, 1e-20, fn, scale, base, 1e-20,
                                                       1e-6, 20, quant=True)
    ry, rh, rq = mhc.hc_expand_norm(*site, 1e-20, quant=True)
    assert _rel(y, ry) < 1e-6 and _rel(h, rh) < 1e-6 and _rel(hq, rq) < 0.1
    want = mhc.hc_coeffs(y, fn, scale, base, 1e-20, 1e-6, 20)  # of the kernel's own y
    for got, ref in zip((pre2, post2, comb2), want, strict=True):
        assert got.shape == ref.shape and (got - ref).abs().max().item() < 2e-6


def test_site_rows_do_not_depend_on_the_batch():
    site, coeff = _inputs(21, 256, 3)
    full = mhc_site.hc_site(*site, 1e-20, *coeff, 1e-20, 1e-6, 20)
    part = mhc_site.hc_site(*[a[7:9] for a in site[:5]], site[5], 1e-20, *coeff, 1e-20, 1e-6,
                            20)
    assert torch.equal(part[0], full[0][7:9]) and torch.equal(part[1], full[1][7:9])
    for got, ref in zip(part[3], full[3], strict=True):
        assert torch.equal(got, ref[7:9])


def test_sm90_compile(sm90_compile):
    cases = mhc_site.aot_cases()
    for case in cases:
        case["no_spill"] = True
    sm90_compile(cases)
