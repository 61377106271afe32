"""A synthetic tokenizer of a released-size config, for running it without the real tokenizer.

The released V4.1-Flash tokenizer is not shipped, but the runtime needs one for every model: to
detokenize, and to build the engram token map (model-spec §2.9), whose number of distinct
normalized keys must equal the config's ``engram_compressed_vocab_size``. ``synthetic_tokenizer``
builds, in memory and deterministically, a tokenizer with the config's vocabulary size, its
special ids and exactly that many engram keys, so released-size configs run end to end with
synthetic weights. Its pieces mean nothing to trained weights; it is not the released tokenizer.

Design: a GPT-2 style byte-level BPE (ByteLevel pre-tokenizer with its regex split, ByteLevel
decoder; ``ignore_merges``, so a word that is a token is one token). Ids, in order, skipping the
special ids; merge ranks follow the same order:
  * specials ``<|bos|>``, ``<|eos|>``, ``<|pad|>``, ``<|noise|>`` (DSpark filler) and
    ``<|image|>`` at the config's ids (an id named twice keeps the first name);
  * the 256 byte tokens, so any string encodes and decodes back exactly;
  * ``FIXED_MERGES``: whitespace runs (key " "), then the Latin-1 letters (``é`` keys as ``e``);
  * new pieces, by length: digit strings up to ``MAX_DIGIT_PIECE``, then lowercase letter
    strings, those over the first m letters of ``LETTERS`` (English frequency order) before any
    with letter m + 1. A piece has a merge for each split into two shorter pieces, so any
    adjacent pieces whose text is a token can still join;
  * variants of the single letters and the letter pieces, per length: `` p`` of each, then
    ``Cap(p)`` and `` Cap(p)`` of each, which normalize to ``p``. Ranked after every new piece,
    so a space or capital joins a word piece last.
So English words encode into pieces of up to four letters, short ones (`` The``) into one token.

Counting: the keys of the specials, bytes and fixed merges are computed with the engram
normalizer itself (some Latin-1 letters key like a lone byte token, e.g. ``æ``); every new piece
is a lowercase ASCII string of length >= 2, its own key, and every variant keys as an existing
piece. So the builder takes exactly ``engram_compressed_vocab_size`` minus the fixed keys new
pieces and fills the remaining ids with variants.

Limits: text round-trips for any Python ``str`` without lone surrogates, except that a special
token's text (e.g. ``"<|eos|>"``) inside the input encodes as that special id and is dropped by
``decode`` unless ``skip_special_tokens=False``. Merge ranks follow id order, not a learned
corpus: plain English averages about 2.5 characters per token (a learned BPE of this size gets
more), and words of capitals or non-Latin-1 letters fall back to byte tokens.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import tokenizers
from tokenizers import AddedToken, decoders, models, pre_tokenizers

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.runtime.tokenizer import Tokenizer, TokenizerError, normalize_engram_key

LETTERS = "etaoinshrdlcumwfgypbvkjxqz"  # English letter frequency order: cut-offs keep e, t, a...
DIGITS = "0123456789"
MAX_DIGIT_PIECE = 3  # digit strings up to "999"; longer numbers split into these
_REPLACEMENT_CHAR = "\ufffd"


class SyntheticTokenizerError(TokenizerError):
    """A config's vocabulary numbers cannot be met by the synthetic design; says which and why."""


def _byte_chars() -> list[str]:
    """GPT-2's byte -> character table, the one ByteLevel pre-tokenizer and decoder use."""
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    others = (b for b in range(256) if b not in printable)
    shifted = {b: chr(256 + i) for i, b in enumerate(others)}
    return [chr(b) if b in printable else shifted[b] for b in range(256)]


BYTE_CHARS = _byte_chars()
_CHAR_TO_BYTE = {c: b for b, c in enumerate(BYTE_CHARS)}
SPACE = BYTE_CHARS[ord(" ")]  # "Ġ"; ASCII letters and digits are their own token strings

# Texts of merges beyond the bytes, each (left, right): whitespace runs (key " ") and the
# Latin-1 letters (two UTF-8 bytes each; most key as an ASCII letter).
FIXED_MERGES: tuple[tuple[str, str], ...] = (
    (" ", " "), ("  ", "  "), ("\n", "\n"), ("\r", "\n"), ("\t", "\t"),
)
_LATIN1_LETTERS = [chr(c) for c in range(0xC0, 0x100) if c not in (0xD7, 0xF7)]


def _token(text: str) -> str:
    """The byte-level token string of ``text`` (its UTF-8 bytes through ``BYTE_CHARS``)."""
    return "".join(BYTE_CHARS[b] for b in text.encode("utf-8"))


def _engram_key(token: str) -> str:
    """The key ``build_engram_token_map`` gives a regular token (its rule, without decoding)."""
    text = bytes(_CHAR_TO_BYTE[c] for c in token).decode("utf-8", errors="replace")
    return token if _REPLACEMENT_CHAR in text else normalize_engram_key(text)


def _special_names(spec: ModelSpec) -> dict[int, str]:
    """Special id -> name; an id named twice (e.g. pad == eos) keeps its first name."""
    roles = [
        ("<|bos|>", spec.bos_token_id),
        ("<|eos|>", spec.eos_token_id),
        ("<|pad|>", spec.pad_token_id),
        ("<|noise|>", spec.dspark_noise_token_id),
        ("<|image|>", spec.image_token_id),
    ]
    names: dict[int, str] = {}
    for name, token_id in roles:
        if token_id is None:
            continue
        if not 0 <= token_id < spec.vocab_size:
            raise SyntheticTokenizerError(
                f"special token {name} has id {token_id}, outside vocab_size {spec.vocab_size}")
        names.setdefault(token_id, name)
    return names


def _fixed_merges() -> list[tuple[str, str]]:
    """(left, right) token strings of ``FIXED_MERGES`` and the Latin-1 letters."""
    merges = [(_token(left), _token(right)) for left, right in FIXED_MERGES]
    return merges + [(_token(letter)[0], _token(letter)[1]) for letter in _LATIN1_LETTERS]


def _ngrams(alphabet: str, n: int) -> Iterator[str]:
    """Every length-``n`` string over ``alphabet``; those over its first m letters come before
    any with letter m + 1, so a cut-off keeps the strings of common letters."""
    yield alphabet[0] * n
    for m in range(1, len(alphabet)):
        old, new, grown = alphabet[:m], alphabet[m], alphabet[: m + 1]
        for k in range(n):  # k: position of the first occurrence of the new letter
            for head in itertools.product(old, repeat=k):
                for tail in itertools.product(grown, repeat=n - k - 1):
                    yield "".join(head) + new + "".join(tail)


def _new_pieces(num_new: int) -> list[str]:
    """``num_new`` strings of ASCII digits or lowercase letters, of length >= 2 (their own token
    strings and engram keys), by length: digit strings up to ``MAX_DIGIT_PIECE``, then letter
    strings (``_ngrams`` order). Length n + 1 starts only once every length-n string is taken,
    so every substring of a piece is a token."""
    pieces: list[str] = []
    n = 2
    while len(pieces) < num_new:
        for alphabet in (DIGITS, LETTERS):
            if alphabet != DIGITS or n <= MAX_DIGIT_PIECE:
                pieces += itertools.islice(_ngrams(alphabet, n), num_new - len(pieces))
        n += 1
    return pieces


def _variant_merges(pieces: list[str], num_variants: int) -> list[tuple[str, str]]:
    """(left, right) token strings of ``num_variants`` space and case variants of the single
    letters and the letter ``pieces``: per length, shortest first, `` p`` of each piece, then
    ``Cap(p)`` and `` Cap(p)`` of each (a capital letter alone is a byte token already)."""
    by_length: dict[int, list[str]] = {1: list(LETTERS)}
    for piece in pieces:
        if piece.isalpha():
            by_length.setdefault(len(piece), []).append(piece)
    merges: list[tuple[str, str]] = []
    for length, bases in by_length.items():
        merges += [(SPACE, p) for p in bases]
        for p in bases:
            cap = p[0].upper() + p[1:]
            merges += ([(cap[0], p[1:])] if length > 1 else []) + [(SPACE, cap)]
        if len(merges) >= num_variants:
            return merges[:num_variants]
    raise SyntheticTokenizerError(
        f"{num_variants} ids would have to repeat an existing engram key, but only "
        f"{len(merges)} space and case variants exist; raise engram_compressed_vocab_size")


def synthetic_tokenizer(spec: ModelSpec) -> Tokenizer:
    """A deterministic byte-level BPE with ``spec.vocab_size`` ids, the spec's special ids, and
    exactly ``spec.engram_compressed_vocab_size`` distinct engram keys (module docstring).

    Raises SyntheticTokenizerError if the numbers cannot be met (a special id out of range,
    too few ids for the 256 byte tokens, or a compressed vocabulary outside what the ids allow).
    """
    specials = _special_names(spec)
    fixed_merges = _fixed_merges()
    fixed = BYTE_CHARS + [left + right for left, right in fixed_merges]
    fixed_keys = {normalize_engram_key(name) for name in specials.values()}
    fixed_keys.update(_engram_key(token) for token in fixed)

    num_free = spec.vocab_size - len(specials) - len(fixed)
    num_new = spec.engram_compressed_vocab_size - len(fixed_keys)
    if num_free < 0:
        raise SyntheticTokenizerError(
            f"vocab_size {spec.vocab_size} is too small: {len(specials)} special ids plus "
            f"{len(fixed)} byte and fixed tokens need {len(specials) + len(fixed)}")
    if not 0 <= num_new <= num_free:
        low, high = len(fixed_keys), len(fixed_keys) + num_free
        raise SyntheticTokenizerError(
            f"engram_compressed_vocab_size is {spec.engram_compressed_vocab_size}, but with "
            f"vocab_size {spec.vocab_size} the synthetic tokenizer gives {low} to {high} keys")
    pieces = _new_pieces(num_new)
    variants = _variant_merges(pieces, num_free - num_new)
    systematic = [(text[:k], text[k:]) for text in pieces for k in range(len(text) - 1, 0, -1)]
    systematic += variants

    merges = fixed_merges + systematic
    regular = iter(fixed + pieces + [left + right for left, right in variants])
    vocab = {specials.get(i) or next(regular): i for i in range(spec.vocab_size)}
    assert len(vocab) == spec.vocab_size, "synthetic tokenizer: duplicate token strings"

    inner = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    inner.decoder = decoders.ByteLevel()
    inner.add_special_tokens(
        [AddedToken(name, special=True, normalized=False) for name in specials.values()])
    return Tokenizer(inner, bos_id=spec.bos_token_id, eos_id=spec.eos_token_id,
                     pad_id=spec.pad_token_id)
