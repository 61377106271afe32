"""The host's launch arithmetic (kernels/triton/launch_math.py) against triton's own."""

import pytest

triton = pytest.importorskip("triton")

from deepinfer.kernels.triton.launch_math import cdiv, next_power_of_2  # noqa: E402

_INTS = [*range(0, 1100), 4095, 4096, 4097, 2**31 - 1, 2**31, 2**40 + 3, 2**63 - 1, 2**63]


def test_next_power_of_2_matches_triton():
    for n in _INTS:
        assert next_power_of_2(n) == triton.next_power_of_2(n), n


@pytest.mark.parametrize("div", [1, 2, 3, 16, 64, 128, 4096, 1000003])
def test_cdiv_matches_triton(div):
    for x in [*_INTS, -1, -div, -div - 1]:
        assert cdiv(x, div) == triton.cdiv(x, div), (x, div)
