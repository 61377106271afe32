"""Engram hash constants and ids (model-spec §2.9 "Hashing", §6.1 tiny constants)."""

from __future__ import annotations

import importlib.resources
import json

import pytest
import torch

from deepinfer.runtime.model.engram_hash import (
    BLOCKED,
    EngramHashConstants,
    compressed_context,
    empty_history,
    engram_hash_ids,
    is_prime,
    make_engram_hash_constants,
)

# model-spec §2.9 tables for the released config.
RELEASED_PRIMES = {
    1: [
        [16000057, 16000079, 16000081, 16000097, 16000121, 16000129, 16000133, 16000183],
        [16000189, 16000207, 16000211, 16000253, 16000277, 16000289, 16000307, 16000321],
        [16000339, 16000381, 16000393, 16000399, 16000403, 16000409, 16000447, 16000463],
    ],
    14: [
        [16000477, 16000487, 16000499, 16000507, 16000511, 16000573, 16000609, 16000627],
        [16000667, 16000669, 16000693, 16000697, 16000711, 16000729, 16000759, 16000769],
        [16000781, 16000799, 16000813, 16000819, 16000841, 16000877, 16000879, 16000889],
    ],
}
RELEASED_MULTIPLIERS = {
    1: [76632096046245, 4839876093313, 35959672319349, 73987337458391],
    14: [67716810739261, 51510806800915, 30921347202721, 82619226485591],
}
# model-spec §6.1 tiny constants.
TINY_PRIMES = {1: [[101, 103], [107, 109], [113, 127]], 5: [[131, 137], [139, 149], [151, 157]]}
TINY_MULTIPLIERS = {
    1: [14831304026200453, 936705081716061, 6959601268494069, 14319439928568407],
    5: [7045141847521113, 5990208150073633, 3941728062971679, 12755487578445383],
}


def released_constants() -> EngramHashConstants:
    return make_engram_hash_constants([1, 14], 4, 8, 16_000_000, 99_092, compressed_pad_id=2)


def tiny_constants() -> EngramHashConstants:
    config_file = importlib.resources.files("deepinfer.artifacts") / "builtin/tiny/config.json"
    cfg = json.loads(config_file.read_text())["text_config"]
    assert cfg["engram_compressed_vocab_size"] == 512  # identity token map
    return make_engram_hash_constants(
        cfg["engram_layer_ids"],
        cfg["engram_max_ngram_size"],
        cfg["engram_n_heads"],
        cfg["engram_vocab_size"],
        cfg["engram_compressed_vocab_size"],
        compressed_pad_id=cfg["engram_pad_token_id"],
    )


def brute_force_hash(seq: list[int], c: EngramHashConstants) -> list[list[list[int]]]:
    """Spec pseudo-code, one position at a time in Python ints: [S][L][(M-1)*H]."""
    max_n, num_heads = c.max_ngram_size, c.n_heads
    out = []
    for p in range(len(seq)):
        tok, blocked = [], False
        for k in range(max_n):
            blocked = blocked or p < k or seq[p - k] == BLOCKED
            tok.append(c.pad_id if blocked else seq[p - k])
        per_layer = []
        for layer in range(len(c.layer_ids)):
            mult = c.multipliers[layer].tolist()
            primes = c.primes[layer].tolist()
            ids, offset = [], 0
            roll = tok[0] * mult[0]
            for n in range(1, max_n):
                roll ^= tok[n] * mult[n]
                assert 0 <= roll < 2**63
                for h in range(num_heads):
                    ids.append(roll % primes[n - 1][h] + offset)
                    offset += primes[n - 1][h]
            per_layer.append(ids)
        out.append(per_layer)
    return out


def hash_whole(seq: list[int], c: EngramHashConstants) -> torch.Tensor:
    """(S, L, (M-1)*H) ids of one sequence that starts at position 0."""
    history = empty_history(1, c.max_ngram_size)
    context = torch.cat([history, torch.tensor([seq], dtype=torch.int64)], dim=1)
    return engram_hash_ids(context, c)[0]


def random_compressed(gen: torch.Generator, shape, vocab: int, blocked_frac: float):
    ids = torch.randint(0, vocab, shape, generator=gen)
    blocked = torch.rand(shape, generator=gen) < blocked_frac
    return ids.masked_fill(blocked, BLOCKED)


def test_is_prime():
    small = [n for n in range(200) if is_prime(n)]
    assert small == [n for n in range(2, 200) if all(n % d for d in range(2, n))]
    assert is_prime(16000057) and not is_prime(16000059) and is_prime(2**61 - 1)


def test_released_constants_match_spec_table():
    c = released_constants()
    assert c.layer_ids == (1, 14)
    assert c.primes.dtype == torch.int64 and c.primes.shape == (2, 3, 8)
    assert c.primes.tolist() == [RELEASED_PRIMES[1], RELEASED_PRIMES[14]]
    assert c.multipliers.tolist() == [RELEASED_MULTIPLIERS[1], RELEASED_MULTIPLIERS[14]]
    assert c.num_embeddings == (384006168, 384016682)
    assert c.pad_id == 2
    assert c.offsets.shape == (2, 24)
    assert c.offsets[1].tolist() == [0] + torch.cumsum(c.primes[1].flatten(), 0)[:-1].tolist()


def test_tiny_constants_match_spec():
    c = tiny_constants()
    assert c.layer_ids == (1, 5)
    assert c.primes.tolist() == [TINY_PRIMES[1], TINY_PRIMES[5]]
    assert c.multipliers.tolist() == [TINY_MULTIPLIERS[1], TINY_MULTIPLIERS[5]]
    assert c.num_embeddings == (660, 864)
    assert c.offsets.tolist() == [[0, 101, 204, 311, 420, 533], [0, 131, 268, 407, 556, 707]]
    assert c.pad_id == 2


@pytest.mark.parametrize("which", ["tiny", "released"])
def test_vectorised_matches_brute_force(which):
    c = tiny_constants() if which == "tiny" else released_constants()
    vocab = 512 if which == "tiny" else 99_092
    gen = torch.Generator().manual_seed(1234)
    batch_size, num_positions = 3, 30
    # A random history (blocked or not) in front of each row: a chunk in mid-sequence.
    context = random_compressed(gen, (batch_size, 3 + num_positions), vocab, blocked_frac=0.15)
    got = engram_hash_ids(context, c)
    assert got.shape == (batch_size, num_positions, 2, 3 * c.n_heads)
    assert got.dtype == torch.int64
    for b in range(batch_size):
        full = brute_force_hash(context[b].tolist(), c)[3:]
        assert got[b].tolist() == full
    for layer, size in enumerate(c.num_embeddings):
        assert 0 <= int(got[:, :, layer].min()) and int(got[:, :, layer].max()) < size


def test_chunked_equals_one_shot():
    c = tiny_constants()
    gen = torch.Generator().manual_seed(7)
    token_map = torch.randint(0, 512, (600,), generator=gen)  # vocab 600 -> 512 compressed
    input_ids = torch.randint(0, 600, (2, 37), generator=gen)
    image_mask = torch.zeros(2, 37, dtype=torch.bool)
    image_mask[0, 8:14] = True
    image_mask[1, 20:21] = True

    history = empty_history(2, c.max_ngram_size)
    context, _ = compressed_context(token_map, input_ids, history, image_mask)
    whole = engram_hash_ids(context, c)

    pieces, start = [], 0
    for end in (5, 12, 12, 13, 37):  # includes an empty chunk and a one-token chunk
        context, history = compressed_context(
            token_map, input_ids[:, start:end], history, image_mask[:, start:end]
        )
        pieces.append(engram_hash_ids(context, c))
        start = end
    assert torch.equal(torch.cat(pieces, dim=1), whole)

    # The images are stored as BLOCKED and the text ids go through the map.
    context, _ = compressed_context(token_map, input_ids, empty_history(2, 4), image_mask)
    assert context[0, 3 + 8 : 3 + 14].eq(BLOCKED).all()
    assert torch.equal(context[1, 3:23], token_map[input_ids[1, :20]])


def test_blocked_makes_all_further_lookbacks_pad():
    c = tiny_constants()
    a, b, x, y, z = 10, 20, 30, 40, 50
    got = hash_whole([a, b, BLOCKED, x, y, z], c)
    # Positions after the DEAD token see nothing before it, as if the sequence started at x.
    assert torch.equal(got[3:], hash_whole([x, y, z], c))
    # The DEAD position itself hashes the all-pad n-grams.
    assert torch.equal(got[2], hash_whole([c.pad_id], c)[0])
    # A valid token further back than a blocked one is still not seen.
    assert torch.equal(hash_whole([a, BLOCKED, x], c)[2], hash_whole([b, BLOCKED, x], c)[2])
    # Before the DEAD token, nothing changes.
    assert torch.equal(got[:2], hash_whole([a, b], c))


def test_rejects_bad_input():
    c = tiny_constants()
    with pytest.raises(ValueError, match="BLOCKED"):
        engram_hash_ids(torch.tensor([[-1, -1, -1, -2]]), c)
    with pytest.raises(ValueError, match="too large"):
        engram_hash_ids(torch.tensor([[-1, -1, -1, 2**40]]), c)
    with pytest.raises(ValueError, match="context_ids"):
        engram_hash_ids(torch.tensor([[1, 2]]), c)
    assert engram_hash_ids(torch.full((2, 3), BLOCKED), c).shape == (2, 0, 2, 6)
