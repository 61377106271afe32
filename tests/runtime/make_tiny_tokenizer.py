"""Generate ``artifacts/builtin/tiny/tokenizer.json``, the tiny model's tokenizer (deterministic).

Run ``python tests/runtime/make_tiny_tokenizer.py`` to (re)write the shipped file;
``tests/runtime/test_tokenizer.py`` checks that the shipped file equals what this writes.

Requirements (model-spec §6.1) and how this design meets them:
  * exactly 512 ids; specials ``<|bos|>`` 0, ``<|eos|>`` 1, ``<|pad|>`` 2, ``<|noise|>`` 500,
    ``<|image|>`` 511;
  * any string encodes, and text round-trips through encode -> decode, case included;
  * the engram token map (``build_engram_token_map``) is the identity: no two ids may decode to
    texts that agree after lowercasing, accent stripping and whitespace collapsing.

Design: a byte-fallback BPE whose alphabet avoids every such collision.
  * Printable ASCII except ``A-Z`` (69 characters, space included) are character tokens.
  * Uppercase letters and the whitespace characters ``\\t \\n \\r`` (which would collide with
    ``a-z`` and with " ") never reach the model: the normalizer rewrites each into the escape
    character ``ESCAPE`` (U+E001, private use) plus a partner -- ``A`` -> ESCAPE ``a``,
    ``\\t`` -> ESCAPE ``1``, ``\\n`` -> ESCAPE ``2``, ``\\r`` -> ESCAPE ``3``. The decoder fuses the
    pieces into one string and rewrites each escape pair back. Alone, ESCAPE decodes to itself.
    (U+E000 is avoided: the engram normalizer uses it as its sentinel for " ".)
    Limitation: text that itself contains U+E001 followed by a partner does not round-trip.
  * Every other byte value (controls, DEL, 0x80-0xFF) is a ``<0xNN>`` byte-fallback token, so any
    string encodes. Alone, a byte >= 0x80 decodes to U+FFFD (keyed by its token string); a
    control byte decodes to a control character, which no normalizer step merges.
  * The remaining ids are BPE merges of lowercase letters only, learned by a small greedy BPE
    over ``_CORPUS`` below (most frequent pair first, ties broken by the pair's text), so merged
    tokens contain no whitespace and stay distinct after normalization.
"""

from __future__ import annotations

import collections
import json
import re
import string
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

VOCAB_SIZE = 512
SPECIAL_TOKENS = {0: "<|bos|>", 1: "<|eos|>", 2: "<|pad|>", 500: "<|noise|>", 511: "<|image|>"}
ESCAPE = "\ue001"
ESCAPED = {c: ESCAPE + c.lower() for c in string.ascii_uppercase} | {
    "\t": ESCAPE + "1",
    "\n": ESCAPE + "2",
    "\r": ESCAPE + "3",
}
REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_PATH = REPO_ROOT / "artifacts" / "builtin" / "tiny" / "tokenizer.json"

_CORPUS = """
the tiny model reads a short prompt and writes a few more words until it reaches the end of its
budget or samples the end token. every layer keeps a small cache of keys and values so that the
next step only computes attention for the newest position. when the scheduler has spare room it
packs another request into the same batch, which keeps the device busy while other requests wait.
a planner decides ahead of time where each expert lives, how large each page of the cache is, and
which kernels run for every operation; the runtime only reads that plan and checks its hash.
the quick brown fox jumps over the lazy dog, then the dog chases the fox around the garden and
through the kitchen while the children laugh. people often think about weather, music, history,
science, language, mathematics, cooking, travel, friendship, and the simple pleasure of reading
books in the evening. numbers such as seven, eleven, thirteen, twenty, hundred and thousand appear
in many stories. questions begin with what, where, which, whose, why, when and how; answers should
be clear, honest, helpful, careful and correct. engineers measure throughput, latency, memory,
bandwidth and power, compare against baselines, and report everything they changed along the way.
"""


def _learn_merges(corpus: str, num_merges: int) -> list[tuple[str, str]]:
    """Greedy BPE over the lowercase words of ``corpus``; deterministic tie-break by pair text."""
    words = collections.Counter(re.findall(r"[a-z]+", corpus))
    pieces = {word: list(word) for word in words}
    merges: list[tuple[str, str]] = []
    while len(merges) < num_merges:
        pair_counts: collections.Counter[tuple[str, str]] = collections.Counter()
        for word, count in words.items():
            symbols = pieces[word]
            for pair in zip(symbols, symbols[1:], strict=False):
                pair_counts[pair] += count
        if not pair_counts:
            raise RuntimeError(f"corpus too small: only {len(merges)} of {num_merges} merges")
        best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))
        merges.append(best)
        for word in words:
            symbols, merged = pieces[word], []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            pieces[word] = merged
    return merges


def _base_tokens() -> list[str]:
    """Character tokens, the escape character, then byte-fallback tokens (see module docstring)."""
    chars = [chr(c) for c in range(0x20, 0x7F) if chr(c) not in string.ascii_uppercase]
    # bytes that never reach the model as bytes: character tokens, or escaped by the normalizer
    handled = {ord(c) for c in chars} | {ord(c) for c in ESCAPED}
    byte_tokens = [f"<0x{b:02X}>" for b in range(256) if b not in handled]
    return chars + [ESCAPE] + byte_tokens


def build_tiny_tokenizer() -> Tokenizer:
    """The tiny tokenizer: 512 ids, specials at 0, 1, 2, 500 and 511."""
    base = _base_tokens()
    num_regular = VOCAB_SIZE - len(SPECIAL_TOKENS)
    merges = _learn_merges(_CORPUS, num_regular - len(base))
    regular = base + [left + right for left, right in merges]
    assert len(set(regular)) == num_regular, "duplicate tokens"

    vocab: dict[str, int] = {}
    regular_iter = iter(regular)
    for token_id in range(VOCAB_SIZE):
        vocab[SPECIAL_TOKENS.get(token_id) or next(regular_iter)] = token_id

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Replace(raw, escaped) for raw, escaped in ESCAPED.items()]
    )
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[a-z]+"), behavior="isolated")
    tok.decoder = decoders.Sequence(
        [decoders.ByteFallback(), decoders.Fuse()]
        + [decoders.Replace(escaped, raw) for raw, escaped in ESCAPED.items()]
    )
    tok.add_special_tokens(
        [AddedToken(text, special=True, normalized=False) for text in SPECIAL_TOKENS.values()]
    )
    return tok


def tiny_tokenizer_json() -> str:
    """The exact text written to ``OUTPUT_PATH``."""
    data = json.loads(build_tiny_tokenizer().to_str())
    return json.dumps(data, indent=2, ensure_ascii=True) + "\n"


def main() -> None:
    OUTPUT_PATH.write_text(tiny_tokenizer_json(), encoding="utf-8")
    print(f"wrote {OUTPUT_PATH}")


if __name__ == "__main__":
    main()
