"""bench/prefill.py's eager-baseline estimate (pure arithmetic, no model)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from prefill import eager_estimate_s  # noqa: E402


def test_eager_estimate_fits_fixed_plus_per_token_time():
    # 10 s fixed + 2 ms per token: probes at 256 and 512 tokens -> 4,096 tokens ~ 18.2 s x 1.25
    half, full = 10 + 256 * 2e-3, 10 + 512 * 2e-3
    assert eager_estimate_s(half, full, 512, 4096) == pytest.approx((10 + 4096 * 2e-3) * 1.25)


def test_eager_estimate_of_a_mostly_fixed_cost_is_not_scaled_by_tokens():
    # the H200 case (session 6): 13.5 s at 512 tokens, about the same at 256; the measured 4K
    # prefill took 12.2 s, where scaling the probe by tokens predicted 108-178 s
    assert eager_estimate_s(13.5, 13.4, 512, 4096) == pytest.approx(13.4 * 1.25)
    assert eager_estimate_s(13.0, 13.5, 512, 4096) < 13.5 * 1.25 * 2
