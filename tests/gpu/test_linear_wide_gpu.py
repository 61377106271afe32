"""The Gluon FP8 projection (kernels/triton/linear_wide.py) on the GPU.

    TRITON_INTERPRET=0 python -m pytest -q -m gpu -s tests/gpu/test_linear_wide_gpu.py

The slice's projection shapes (wo_a grouped) at 65-256 rows, outputs NaN-poisoned before the
launch, against the fp64 reference: 5e-3 (bf16 output, as ``linear_decode``'s check), and no
worse than ``linear_decode`` on the same call by more than bf16 rounding (both sum the same
exact products in fp32, in another order). Every launch class (1 / 2 / 4 warpgroups, token
tiles of 64 / 128 / 256, BK 32 / 64, several token tiles, split-K and not) on one shape.
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu.test_gemm_side_gpu import (
    SLICE_PROJECTIONS,
    V41_HIDDEN,
    _ms,
    _random_fp8_weight,
    _rel,
    _row,
    nan_poisoned_allocations,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _gpu_only():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an SM90 GPU")


def _reference(x, w, groups):
    from deepinfer.kernels.reference import linear

    return linear.linear(x[:, 0], w)[:, None] if groups == 1 else linear.grouped_linear(x, w)


@pytest.mark.parametrize("num_tokens", [65, 128, 200, 256])
def test_linear_wide_gpu(num_tokens):
    from deepinfer.kernels.triton import linear_decode, linear_wide

    for name, groups, out_features, in_features in SLICE_PROJECTIONS:
        x = torch.randn(num_tokens, groups, in_features, device="cuda", dtype=torch.bfloat16)
        w = _random_fp8_weight(groups * out_features, in_features)
        ref = _reference(x, w, groups)
        with nan_poisoned_allocations():
            out = linear_wide.linear_wide(x, w, out_features)
            base = linear_decode.linear_decode(x, w, out_features)
        flops = 2.0 * num_tokens * groups * out_features * in_features
        err, base_err = _rel(out, ref), _rel(base, ref)
        _row(f"linear_wide {name}", f"M{num_tokens} G{groups} N{out_features} K{in_features}",
             err, 5e-3, _ms(lambda x=x, w=w, o=out_features: linear_wide.linear_wide(x, w, o)),
             flops)
        _row(f"linear_decode {name}", f"M{num_tokens}", base_err, 5e-3,
             _ms(lambda x=x, w=w, o=out_features: linear_decode.linear_decode(x, w, o)), flops)
        assert err <= 1.5 * base_err + 1e-4, (name, err, base_err)


@pytest.mark.parametrize("config", [
    dict(WG=1, BT=128, BK=32, STAGES=6), dict(WG=1, BT=256, BK=64, STAGES=3),
    dict(WG=1, BT=64, BK=64, STAGES=4), dict(WG=2, BT=64, BK=32, STAGES=6),
    dict(WG=2, BT=256, BK=32, STAGES=4), dict(WG=2, BT=256, BK=64, STAGES=4),
    dict(WG=4, BT=128, BK=64, STAGES=2)])
@pytest.mark.parametrize("split_k", [1, 3])
def test_linear_wide_launches_gpu(config, split_k):
    """Each launch class on wo_b at 200 rows (several token tiles where BT < 200), split and
    not, against the reference; with ``MMA_FIRST`` the same bits."""
    from deepinfer.kernels.triton import linear_wide

    torch.manual_seed(1)
    num_tokens, out_features, in_features = 200, V41_HIDDEN, 8192
    x = torch.randn(num_tokens, 1, in_features, device="cuda", dtype=torch.bfloat16)
    w = _random_fp8_weight(out_features, in_features)
    with nan_poisoned_allocations():
        out = linear_wide.linear_wide(x, w, out_features, split_k=split_k,
                                      config={**config, "MMA_FIRST": False})
        first = linear_wide.linear_wide(x, w, out_features, split_k=split_k,
                                        config={**config, "MMA_FIRST": True})
    assert torch.equal(first, out), config  # the wgmmas before the refill: the same bits
    label = (f"WG{config['WG']} BT{config['BT']} BK{config['BK']} S{config['STAGES']} "
             f"split {split_k}")
    _row(f"linear_wide {label}", f"M{num_tokens} wo_b", _rel(out, _reference(x, w, 1)), 5e-3)


@pytest.mark.parametrize("num_tokens", [4096])
def test_linear_wide_prefill_rows_gpu(num_tokens):
    """At prefill rows ``wide_config`` takes two warpgroups for the large projections (wo_b,
    wo_a grouped) and one for the small (wq_a): each against the reference and no worse than
    ``linear_decode`` by more than bf16 rounding."""
    from deepinfer.kernels.triton import linear_decode, linear_wide

    torch.manual_seed(5)
    for name, groups, out_features, in_features in SLICE_PROJECTIONS:
        wg = linear_wide.wide_config(num_tokens, out_features, groups)["WG"]
        x = torch.randn(num_tokens, groups, in_features, device="cuda", dtype=torch.bfloat16)
        w = _random_fp8_weight(groups * out_features, in_features)
        with nan_poisoned_allocations():
            out = linear_wide.linear_wide(x, w, out_features)
            base = linear_decode.linear_decode(x, w, out_features)
        ref = _reference(x, w, groups)
        err, base_err = _rel(out, ref), _rel(base, ref)
        _row(f"linear_wide {name} WG{wg}", f"M{num_tokens}", err, 5e-3)
        assert err <= 1.5 * base_err + 1e-4, (name, wg, err, base_err)


@pytest.mark.parametrize("num_tokens", [200, 4096])
@pytest.mark.parametrize("warpgroups", [1, 2])
def test_linear_wide_mma_first_gpu(num_tokens, warpgroups):
    """A step's wgmmas before its barrier and TMA refill (``MMA_FIRST``) give the other
    order's bits (the same exact products, each output's K sums in the same order; split-K
    as ``wide_split`` picks it) on the slice's projections, one and two warpgroups at 256-row
    token tiles, every output written; against the reference, both orders timed."""
    from deepinfer.kernels.triton import linear_wide

    torch.manual_seed(9)
    for name, groups, out_features, in_features in SLICE_PROJECTIONS:
        if out_features % (64 * warpgroups):
            continue
        x = torch.randn(num_tokens, groups, in_features, device="cuda", dtype=torch.bfloat16)
        w = _random_fp8_weight(groups * out_features, in_features)
        cfg = dict(WG=warpgroups, BT=256, BK=64, STAGES=4 if warpgroups == 2 else 3, waves=1)
        with nan_poisoned_allocations():
            want = linear_wide.linear_wide(x, w, out_features, config={**cfg, "MMA_FIRST": False})
            got = linear_wide.linear_wide(x, w, out_features, config={**cfg, "MMA_FIRST": True})
        assert not got.isnan().any(), name
        assert torch.equal(got, want), (name, (got.float() - want.float()).abs().max())
        flops = 2.0 * num_tokens * groups * out_features * in_features
        for first in (False, True):
            c = {**cfg, "MMA_FIRST": first}
            _row(f"linear_wide WG{warpgroups}{' first' if first else ''} {name}",
                 f"M{num_tokens}", _rel(got, _reference(x, w, groups)), 5e-3,
                 _ms(lambda x=x, w=w, o=out_features, c=c: linear_wide.linear_wide(x, w, o,
                                                                                config=c)),
                 flops)


@pytest.mark.parametrize("num_tokens", [63, 64, 256, 1000])
def test_linear_quant_act_dispatch_gpu(num_tokens, monkeypatch):
    """The registered Q8_32 projection takes linear_wide from ``linear.WIDE_MIN_ROWS`` rows
    (linear_decode below; the prefill sizes too), and its output matches linear_decode's on
    the same call."""
    from deepinfer.kernels.triton import linear, linear_decode, linear_wide

    calls = []
    real = linear_wide.linear_wide
    monkeypatch.setattr(linear_wide, "linear_wide",
                        lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k))
    x = torch.randn(num_tokens, V41_HIDDEN, device="cuda", dtype=torch.bfloat16)
    w = _random_fp8_weight(1024, V41_HIDDEN)
    out = linear.linear_quant_act(x, w)
    assert linear.WIDE_MAX_ROWS is None
    assert calls == ([num_tokens] if num_tokens >= linear.WIDE_MIN_ROWS > 0 else [])
    from deepinfer.kernels.triton import quant_act
    base = linear_decode.linear_decode(quant_act.fake_quant_fp8_block32(x)[:, None], w, 1024)
    _row("linear_quant_act vs decode", f"M{num_tokens}", _rel(out, base[:, 0]), 5e-3)
