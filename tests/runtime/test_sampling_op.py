"""The reference ``sample_tokens`` / ``token_logprobs`` ops on hand-made logits: the noise hash,
greedy, each filter, and the empirical distribution against the filtered one."""

from __future__ import annotations

import math

import pytest
import torch

from deepinfer.kernels.reference.sampling import (
    filter_mask,
    greedy_tokens,
    row_keys,
    sample_tokens,
    token_logprobs,
    uniform_noise,
)

MASK64 = (1 << 64) - 1


def py_mix64(x: int) -> int:
    """splitmix64's finaliser on unsigned Python ints: the oracle of the int64 torch version."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def py_uniform(seed: int, position: int, v: int) -> float:
    gamma = 0x9E3779B97F4A7C15
    key = py_mix64((py_mix64(seed) + (position + 1) * gamma) & MASK64)
    return ((py_mix64((key + (v + 1) * gamma) & MASK64) >> 11) + 0.5) * 2.0**-53


def as_int64(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def rows(n: int, *, temperature=1.0, top_p=1.0, top_k=-1, min_p=0.0, seeds=None, positions=None):
    """Per-row argument tensors for ``sample_tokens`` (scalars broadcast to n rows)."""
    return dict(
        temperature=torch.full((n,), temperature, dtype=torch.float32),
        top_p=torch.full((n,), top_p, dtype=torch.float32),
        top_k=torch.full((n,), top_k, dtype=torch.int64),
        min_p=torch.full((n,), min_p, dtype=torch.float32),
        seeds=torch.arange(n) if seeds is None else seeds,
        positions=torch.zeros(n, dtype=torch.int64) if positions is None else positions,
    )


def test_noise_matches_the_python_oracle_bit_for_bit():
    seeds = torch.tensor([0, 1, 12345, (1 << 63) - 1])
    positions = torch.tensor([0, 7, 1 << 40, 3])
    keys = row_keys(seeds, positions).tolist()
    gamma = 0x9E3779B97F4A7C15
    for s, p, k in zip(seeds.tolist(), positions.tolist(), keys, strict=True):
        assert k == as_int64(py_mix64((py_mix64(s) + (p + 1) * gamma) & MASK64))
    u = uniform_noise(seeds, positions, 50)
    for r in range(4):
        for v in (0, 1, 31, 49):
            assert u[r, v].item() == py_uniform(seeds[r].item(), positions[r].item(), v)
    assert 0.0 < u.min().item() and u.max().item() < 1.0


def test_greedy_is_argmax_with_lowest_index_on_ties():
    logits = torch.tensor([[0.0, 3.0, 3.0, 1.0], [5.0, -1.0, 5.0, 5.0], [-2.0, -1.0, -3.0, -1.0]])
    args = rows(3, temperature=0.0, top_k=1)  # filters are irrelevant to greedy
    assert sample_tokens(logits, **args).tolist() == [1, 0, 1]


def test_top_k_keeps_exactly_k_lowest_index_first_on_ties():
    logits = torch.tensor([[1.0, 4.0, 4.0, 4.0, 0.0]])
    mask = filter_mask(logits, torch.tensor([1.0]), torch.tensor([2]), torch.tensor([0.0]))
    assert mask.tolist() == [[False, True, True, False, False]]
    mask = filter_mask(logits, torch.tensor([1.0]), torch.tensor([0]), torch.tensor([0.0]))
    assert mask.all()  # top_k 0 = off (as -1)


def test_min_p_is_relative_to_the_most_probable_token():
    probs = torch.tensor([[0.5, 0.3, 0.11, 0.09]])
    mask = filter_mask(probs.log(), torch.tensor([1.0]), torch.tensor([-1]), torch.tensor([0.2]))
    assert mask.tolist() == [[True, True, True, False]]  # threshold 0.1


def test_top_p_keeps_the_smallest_prefix_reaching_the_mass_and_at_least_one():
    probs = torch.tensor([[0.1, 0.5, 0.25, 0.15], [0.97, 0.01, 0.01, 0.01]])
    mask = filter_mask(probs.log(), torch.tensor([0.7, 0.01]), torch.tensor([-1, -1]),
                       torch.tensor([0.0, 0.0]))
    # row 0: 0.5 (< 0.7) then 0.25 reaches 0.75: keep {1, 2}; row 1: only the top token.
    assert mask.tolist() == [[False, True, True, False], [True, False, False, False]]


def test_top_p_applies_to_the_survivors_of_top_k_renormalised():
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    # top-k 2 -> {0.4, 0.3} renormalised to {0.571, 0.429}; top-p 0.55 then keeps only the first.
    mask = filter_mask(probs.log(), torch.tensor([0.55]), torch.tensor([2]), torch.tensor([0.0]))
    assert mask.tolist() == [[True, False, False, False]]


def test_masked_tokens_are_never_sampled_and_nan_rows_are_flagged():
    logits = torch.tensor([[0.0, -math.inf, 0.0, -math.inf]]).expand(500, 4).contiguous()
    tokens = sample_tokens(logits, **rows(500))
    assert set(tokens.tolist()) == {0, 2}
    bad = torch.zeros(2, 4)
    bad[1, 3] = math.nan
    assert sample_tokens(bad, **rows(2))[1].item() == -1  # flagged, no host sync in the op


def test_empty_batch():
    assert sample_tokens(torch.zeros(0, 8), **rows(0)).shape == (0,)


PROBS = [0.4, 0.25, 0.15, 0.1, 0.06, 0.04]
CASES = {
    # temperature 1, no filters: the distribution itself.
    "plain": (dict(), PROBS),
    # temperature 2 on log-probabilities: proportional to sqrt(p).
    "temperature": (dict(temperature=2.0), [math.sqrt(p) for p in PROBS]),
    # top-k 5 drops 0.04; min-p 0.2 (threshold 0.08) drops 0.06; survivors renormalised to
    # [.444, .278, .167, .111]; top-p 0.8 keeps the first three: [.4, .25, .15] / .8.
    "filters": (dict(top_k=5, min_p=0.2, top_p=0.8), [0.4, 0.25, 0.15, 0, 0, 0]),
}


@pytest.mark.parametrize("vary", ["seed", "position"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_empirical_frequencies_match_the_filtered_distribution(case, vary):
    kwargs, weights = CASES[case]
    expected = torch.tensor(weights, dtype=torch.float64) / sum(weights)
    n = 20_000
    logits = torch.tensor(PROBS).log().expand(n, len(PROBS)).contiguous()
    index = torch.arange(n)
    fixed = torch.full((n,), 7)
    seeds, positions = (index, fixed) if vary == "seed" else (fixed, index)
    tokens = sample_tokens(logits, **rows(n, seeds=seeds, positions=positions, **kwargs))
    freq = torch.bincount(tokens, minlength=len(PROBS)).double() / n
    sigma = (expected * (1 - expected) / n).sqrt()
    # 5 sigma per token: a false alarm is ~1e-6, a wrong distribution (e.g. the temperature
    # ignored: 0.4 vs 0.31) is ~20 sigma off.
    assert (freq - expected).abs().le(5 * sigma + 1e-12).all(), (freq, expected)
    assert freq[expected == 0].sum() == 0


def test_logprobs_are_of_the_raw_distribution():
    logits = torch.tensor([[2.0, 1.0, 2.0, -1.0], [0.0, 0.0, 0.0, 0.0]])
    sampled, top_ids, top_lp = token_logprobs(logits, torch.tensor([3, 1]), 3)
    expected = torch.log_softmax(logits.double(), dim=-1)
    assert torch.allclose(sampled.double(), expected[[0, 1], [3, 1]], atol=1e-6)
    assert top_ids.tolist() == [[0, 2, 1], [0, 1, 2]]  # ties: lower id first
    assert torch.allclose(top_lp.double(), expected.gather(1, top_ids), atol=1e-6)
    assert sampled.dtype == top_lp.dtype == torch.float32
    assert token_logprobs(logits, torch.tensor([0, 0]), 0)[1].shape == (2, 0)


def test_greedy_tokens_equal_sample_tokens_at_temperature_zero():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(64, 97, generator=g)
    logits[3, [10, 40]] = 50.0  # a tie: the lower index wins in both
    logits[7, :] = -math.inf
    logits[7, 12] = 0.0
    logits[9, 5] = math.nan
    greedy = rows(64, temperature=0.0, top_p=0.5, top_k=3)  # greedy ignores the filters
    want = sample_tokens(logits, **greedy)
    got = greedy_tokens(logits)
    assert torch.equal(got, want)
    assert got[3].item() == 10 and got[7].item() == 12 and got[9].item() == -1
    assert greedy_tokens(torch.zeros(0, 8)).shape == (0,)
