"""The shared-memory-operand bf16 projection (kernels/triton/linear_ss.py) on the GPU.

    TRITON_INTERPRET=0 python -m pytest -q -m gpu -s tests/gpu/test_linear_ss_gpu.py

The slice's projection shapes (wo_a grouped) on the FP8 weight's bf16 twin, outputs
NaN-poisoned before the launch: bit-identical to ``linear_wide`` on the FP8 weight (both sum the
same exact products in K order into one fp32 accumulator, 16 at a time) and within 5e-3 of the
fp64 reference; partial token tiles, several token tiles, and every compile-gate tile.
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu.test_gemm_side_gpu import (
    SLICE_PROJECTIONS,
    _ms,
    _random_fp8_weight,
    _rel,
    _row,
    nan_poisoned_allocations,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
    reason="needs an SM90 GPU")]


@pytest.mark.parametrize("num_tokens", [1, 200, 1024, 4096])
def test_linear_ss_matches_linear_wide(num_tokens):
    from deepinfer.kernels.reference import linear
    from deepinfer.kernels.triton import linear_ss, linear_wide

    for name, groups, out_features, in_features in SLICE_PROJECTIONS:
        x = torch.randn(num_tokens, groups, in_features, device="cuda", dtype=torch.bfloat16)
        w = _random_fp8_weight(groups * out_features, in_features)
        wb = w.dequantize()
        cfg = None  # ss_config's tile
        if not linear_ss.accepts(x, wb, out_features, cfg):
            continue
        ref = (linear.linear(x[:, 0], w)[:, None] if groups == 1
               else linear.grouped_linear(x, w))
        with nan_poisoned_allocations():
            out = linear_ss.linear_ss(x, wb, out_features, cfg)
            base = linear_wide.linear_wide(x, w, out_features, split_k=1)
        flops = 2.0 * num_tokens * groups * out_features * in_features
        _row(f"linear_ss {name}", f"M{num_tokens} G{groups} N{out_features} K{in_features}",
             _rel(out, ref), 5e-3,
             _ms(lambda x=x, w=wb, o=out_features, c=cfg: linear_ss.linear_ss(x, w, o, c)),
             flops)
        assert not out.isnan().any(), name
        assert torch.equal(out, base), (name, num_tokens, _rel(out, base))
        assert _rel(out, ref) < 5e-3, name


def test_linear_ss_every_compile_tile():
    """Each compile-gate tile on one shape (wo_b at 300 rows: a partial token tile) gives the
    default tile's bits."""
    from deepinfer.kernels.triton import linear_ss

    x = torch.randn(300, 1, 8192, device="cuda", dtype=torch.bfloat16)
    wb = _random_fp8_weight(5120, 8192).dequantize()
    want = linear_ss.linear_ss(x, wb, 5120)
    for case in linear_ss.aot_cases():
        k = case["constexprs"]
        cfg = {"BM": k["BM"], "BN": k["BN"], "BK": k["BK"], "STAGES": k["STAGES"]}
        with nan_poisoned_allocations():
            got = linear_ss.linear_ss(x, wb, 5120, cfg)
        assert torch.equal(got, want), case["id"]


def test_linear_takes_the_twin_from_ss_min_rows(monkeypatch):
    """``linear.linear`` / ``grouped_linear`` on an FP8 weight with a bf16 twin run
    ``linear_ss`` from ``SS_MIN_ROWS`` rows (not below, not without a twin, not with the switch
    at 0) and give the twinless call's bits."""
    from deepinfer.kernels.quantized import Fp8BlockWeight
    from deepinfer.kernels.triton import linear, linear_ss

    calls = []
    real = linear_ss.linear_ss
    monkeypatch.setattr(linear_ss, "linear_ss", lambda *a, **k: calls.append(1) or real(*a, **k))
    for name, groups, out_features, in_features in SLICE_PROJECTIONS:
        w = _random_fp8_weight(groups * out_features, in_features)
        twin = Fp8BlockWeight(w.codes, w.scale, w.dequantize())
        for rows in (linear.SS_MIN_ROWS - 1, linear.SS_MIN_ROWS, 4096):
            x = torch.randn(rows, groups, in_features, device="cuda", dtype=torch.bfloat16)
            call = ((lambda w, x=x: linear.linear(x[:, 0], w)) if groups == 1
                    else (lambda w, x=x: linear.grouped_linear(x, w)))
            calls.clear()
            want, got = call(w), call(twin)
            assert calls == ([1] if rows >= linear.SS_MIN_ROWS else []), (name, rows)
            assert torch.equal(got, want), (name, rows)
    monkeypatch.setattr(linear, "SS_MIN_ROWS", 0)
    calls.clear()
    x = torch.randn(4096, 1, 8192, device="cuda", dtype=torch.bfloat16)
    w = _random_fp8_weight(5120, 8192)
    linear.linear(x[:, 0], Fp8BlockWeight(w.codes, w.scale, w.dequantize()))
    assert calls == []
