"""Batch-invariant prefill steps on the GPU: from ``gemm_fp8.INVARIANT_MIN_ROWS`` rows a row's
result does not depend on how many rows share its step.

    TRITON_INTERPRET=0 python -m pytest -q -m gpu -s tests/gpu/test_batch_invariance_gpu.py

The slice's FP8 projections (``linear._launch``, the dispatch both registered ops reach: wo_a
grouped) and the mHC coefficients at 8,192 rows, against the same call on the first 1,024 /
2,048 / 4,096 rows: bit-identical (session 22 round 124a: wkv split K at 4,096 rows and not at
8,192, the coefficients 8 and 4 ways, and a prompt's first token flipped between 4K and 8K
chunks), and the routed experts' dispatch (session 23: 1,024 rows ran the decode pipeline).
Below that many rows the launches still split by size; a check there would not hold.
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu.test_gemm_side_gpu import SLICE_PROJECTIONS, V41_HC, V41_HIDDEN, _random_fp8_weight

pytestmark = pytest.mark.gpu

FULL_ROWS = 8192


@pytest.fixture(autouse=True)
def _gpu_only():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an SM90 GPU")


def _prefixes() -> list[int]:
    from deepinfer.kernels.triton import gemm_fp8

    lim = gemm_fp8.INVARIANT_MIN_ROWS
    return [lim, 2 * lim, FULL_ROWS // 2, FULL_ROWS // 2 + 1000]


@pytest.mark.parametrize("name,groups,out_features,in_features", SLICE_PROJECTIONS)
def test_projection_rows_invariant_gpu(name, groups, out_features, in_features):
    from deepinfer.kernels.triton import linear, quant_act

    torch.manual_seed(11)
    x = torch.randn(FULL_ROWS, groups, in_features, device="cuda", dtype=torch.bfloat16)
    x = quant_act.fake_quant_fp8_block32(x.view(FULL_ROWS, -1)).view_as(x)
    w = _random_fp8_weight(groups * out_features, in_features)
    full = linear._launch(x, w, out_features)
    for rows in _prefixes():
        part = linear._launch(x[:rows].contiguous(), w, out_features)
        bad = (part != full[:rows]).reshape(rows, -1).any(dim=1).nonzero().flatten()
        assert bad.numel() == 0, \
            f"{name}: {bad.numel()} of {rows} rows differ from the {FULL_ROWS}-row call " \
            f"(first {bad[0].item()})"


def test_mhc_coeffs_rows_invariant_gpu():
    from deepinfer.kernels.triton import mhc as tri_mhc

    torch.manual_seed(12)
    s, d = V41_HC, V41_HIDDEN
    x = torch.randn(FULL_ROWS, s, d, device="cuda", dtype=torch.bfloat16)
    fn = torch.randn((2 + s) * s, s * d, device="cuda") * 0.01
    scale = torch.tensor([0.5, 0.7, 1.3], device="cuda")
    base = torch.randn((2 + s) * s, device="cuda") * 0.3
    rest = (fn, scale, base, 1e-20, 1e-6, 20)
    full = tri_mhc.hc_coeffs(x, *rest)
    for rows in _prefixes():
        part = tri_mhc.hc_coeffs(x[:rows].contiguous(), *rest)
        for label, p, f in zip(("pre", "post", "comb"), part, full, strict=True):
            assert torch.equal(p, f[:rows]), f"hc_coeffs {label}: {rows} rows differ"


def test_index_scores_and_topk_rows_invariant_gpu():
    """A prompt's indexer at ratio 2 (session 39's kernels: the keys-on-M float-key scores and,
    from ``topk_bisect.MIN_ROWS`` rows, the bisection top-k): a query's scores and picks the
    same in a prefix call of the first rows (a shorter chunk) as in the 8,192-query call, at
    any row count — the scores kernel's per-query sums do not depend on the query's slot in a
    program, and both top-k kernels give the reference's positions."""
    from deepinfer.kernels.reference import quant
    from deepinfer.kernels.triton import indexer, topk

    torch.manual_seed(13)
    n, hi, d = FULL_ROWS, 32, 128
    t = n // 2
    q = quant.fake_quant_fp4_ue8m0_block32(torch.randn(n, hi, d, device="cuda"))
    q = q.to(torch.bfloat16)
    w = torch.randn(n, hi, device="cuda") * (d ** -0.5) * (hi ** -0.5)
    keys = quant.fake_quant_fp4_ue8m0_block32(torch.randn(t, d, device="cuda"))
    keys = keys.to(torch.bfloat16)
    vis = (torch.arange(n, device="cuda") + 1) // 2
    full = indexer.index_scores(q, w, keys, vis)
    picks = topk.topk_positions(full, 512, vis)
    for rows in (100, 600) + tuple(_prefixes()):  # below and above topk_bisect.MIN_ROWS
        part = indexer.index_scores(q[:rows].contiguous(), w[:rows].contiguous(), keys,
                                    vis[:rows].contiguous())
        assert torch.equal(part, full[:rows]), f"index scores: {rows} rows differ"
        got = topk.topk_positions(part, 512, vis[:rows].contiguous())
        assert torch.equal(got, picks[:rows]), f"top-k: {rows} rows differ"


def test_routed_experts_rows_invariant_gpu():
    """The routed experts of the slice (384 W4A8-order MXFP4 experts, top-6, D 5120, I 2304)
    through ``run_experts``' dispatch: at 1,024 rows (16 pairs per expert) they ran the decode
    pipeline (FP8 sums) before session 23 and the bf16 prefill pipeline at 8,192, so a row's
    result depended on its step's size; now every step from ``INVARIANT_MIN_ROWS`` rows runs the
    bf16 pipeline (64 or 128 pairs per block: the same sums per row)."""
    from deepinfer.kernels.triton import moe_experts, moe_gluon_w4a8

    torch.manual_seed(13)
    experts, topk, d, inter = 384, 6, V41_HIDDEN, 2304
    ids = torch.rand(FULL_ROWS, experts, device="cuda").topk(topk, dim=1).indices
    route_w = torch.rand(FULL_ROWS, topk, device="cuda")
    x = (torch.randn(FULL_ROWS, d, device="cuda") * 0.5).to(torch.bfloat16)

    def stack(out_features: int, in_features: int):
        packed = torch.randint(0, 256, (experts, out_features, in_features // 2),
                               dtype=torch.uint8, device="cuda")
        scale = torch.randint(119, 123, (experts, out_features, in_features // 32),
                              dtype=torch.uint8, device="cuda")
        data = moe_gluon_w4a8.to_kernel_order_gpu(packed).view(torch.int8)
        return moe_experts.ExpertWeights(data, scale, "mxfp4", scale_max=int(scale.max()),
                                         w4a8_order=True)

    weights = [stack(inter, d), stack(inter, d), stack(d, inter)]
    full = moe_experts.run_experts(x, ids, route_w, *weights, 10.0)
    for rows in _prefixes():
        part = moe_experts.run_experts(x[:rows].contiguous(), ids[:rows].contiguous(),
                                       route_w[:rows].contiguous(), *weights, 10.0)
        bad = (part != full[:rows]).any(dim=1).nonzero().flatten()
        assert bad.numel() == 0, \
            f"experts: {bad.numel()} of {rows} rows differ from the {FULL_ROWS}-row call"
