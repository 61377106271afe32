"""Launch arithmetic on the host in plain Python: ``triton.cdiv`` and
``triton.next_power_of_2`` are ``ConstexprFunction`` objects (triton 3.6 and 3.7), and a call
from Python goes through their wrapper (~1.8-2.1 µs each on the CI machine against ~0.1 µs
here); a prefill layer's wrappers made ~140 such calls (round 159's host profile: 1,101
``jit.py(__call__)`` calls in 8 layers). Same results for every int
(tests/kernels/triton/test_launch_math.py). Inside kernels the triton ones stay."""

from __future__ import annotations


def cdiv(x: int, div: int) -> int:
    """ceil(x / div) for ints, as ``triton.cdiv``: (x + div - 1) // div."""
    return (x + div - 1) // div


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n for 0 < n < 2**64, as ``triton.next_power_of_2`` (its bit
    smear: n = 0 gives 0)."""
    n -= 1
    n |= n >> 1
    n |= n >> 2
    n |= n >> 4
    n |= n >> 8
    n |= n >> 16
    n |= n >> 32
    return n + 1
