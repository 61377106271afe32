"""Tokenizer loading, the shipped tiny tokenizer, and the engram token map."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest
import tokenizers
import torch
from tokenizers import AddedToken, models

from deepinfer.runtime.tokenizer import (
    Tokenizer,
    TokenizerError,
    build_engram_token_map,
    load_tokenizer,
    normalize_engram_key,
)

GENERATOR_PATH = Path(__file__).with_name("make_tiny_tokenizer.py")
ESCAPE = "\ue001"  # the tiny tokenizer's escape character; text containing it may not round-trip


def load_generator():
    spec = importlib.util.spec_from_file_location("make_tiny_tokenizer", GENERATOR_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny() -> Tokenizer:
    return load_tokenizer("builtin:tiny")


def test_shipped_tiny_tokenizer_is_reproducible():
    generator = load_generator()
    shipped = generator.OUTPUT_PATH.read_text(encoding="utf-8")
    assert json.loads(shipped) == json.loads(generator.tiny_tokenizer_json())


def test_tiny_special_ids(tiny):
    assert tiny.vocab_size == 512
    assert (tiny.bos_id, tiny.eos_id, tiny.pad_id) == (0, 1, 2)
    expected = {0: "<|bos|>", 1: "<|eos|>", 2: "<|pad|>", 500: "<|noise|>", 511: "<|image|>"}
    for token_id, text in expected.items():
        assert tiny.id_to_token(token_id) == text
        assert tiny.encode(text) == [token_id]
        assert tiny.decode([token_id]) == ""
        assert tiny.decode([token_id], skip_special_tokens=False) == text
    assert tiny.id_to_token(512) is None


def test_tiny_engram_map_is_identity(tiny):
    token_map, num_compressed = build_engram_token_map(tiny)
    assert num_compressed == 512
    assert token_map.dtype == torch.int64
    assert torch.equal(token_map, torch.arange(512))


@pytest.mark.parametrize(
    "text",
    [
        "the quick brown fox, jumps over 12 lazy dogs.",
        "The Quick Brown Fox, JUMPS over 12 lazy dogs!",
        "Line one\n\tLine two\r\n  (indented) <tags> & 'quotes' \"too\"; 100% ~done~",
        "héllo wörld, naïve café 🦊 日本語 \x00\x07\x7f",
        "",
    ],
)
def test_tiny_round_trip(tiny, text):
    ids = tiny.encode(text)
    assert all(0 <= i < 512 for i in ids)
    assert tiny.decode(ids) == text


def test_tiny_encodes_any_string(tiny):
    rng = random.Random(0)
    for _ in range(50):
        chars = []
        for _ in range(rng.randint(1, 20)):
            code = rng.choice([rng.randint(0, 0x7F), rng.randint(0x80, 0xFFFF), 0x1F600])
            if 0xD800 <= code <= 0xDFFF or chr(code) == ESCAPE:  # lone surrogates aren't text
                code = 0x20
            chars.append(chr(code))
        text = "".join(chars)
        assert tiny.decode(tiny.encode(text)) == text


@pytest.mark.parametrize(
    "text, key",
    [
        ("Hello", "hello"),
        ("HÉLLO", "hello"),
        ("ﬁ", "fi"),  # NFKC
        (" ", " "),  # whitespace-only tokens keep one space (the sentinel trick)
        ("\n\n", " "),
        ("\t \r\n", " "),
        ("  Hello  ", "hello"),
        ("a  b", "a b"),
        ("a\t\nb ", "a b"),
        ("\u0301", "\u0301"),  # a lone accent strips to empty -> the raw text
        ("", ""),
    ],
)
def test_normalize_engram_key(text, key):
    assert normalize_engram_key(text) == key


def hand_built_tokenizer(tokens: list[str]) -> Tokenizer:
    inner = tokenizers.Tokenizer(
        models.WordLevel(vocab={t: i for i, t in enumerate(tokens)}, unk_token="<unk>")
    )
    inner.add_special_tokens([AddedToken("<unk>", special=True)])
    return Tokenizer(inner)


def test_engram_map_merges_case_accents_and_whitespace():
    tokens_and_expected = [
        ("<unk>", 0),
        ("Hello", 1),
        ("hello", 1),
        ("héllo", 1),
        ("HÉLLO", 1),
        (" ", 2),
        ("\n\n", 2),
        ("\t", 2),
        ("a  b", 3),
        ("a b", 3),
        ("a\tb", 3),
        ("X\ufffd", 4),  # contains U+FFFD: keyed by the raw token, so case is kept
        ("x\ufffd", 5),
        (" x ", 6),
        ("x", 6),
        ("   ", 2),
        ("\u0301", 7),
    ]
    tok = hand_built_tokenizer([t for t, _ in tokens_and_expected])
    token_map, num_compressed = build_engram_token_map(tok)
    assert token_map.tolist() == [e for _, e in tokens_and_expected]
    assert num_compressed == 8


def test_from_dir_errors_name_the_file(tmp_path):
    with pytest.raises(TokenizerError, match="tokenizer.json.*not found"):
        Tokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=f"{tmp_path}/tokenizer.json: cannot parse"):
        Tokenizer.from_dir(tmp_path)
    with pytest.raises(TokenizerError, match="not a directory"):
        Tokenizer.from_dir(tmp_path / "missing")
    with pytest.raises(TokenizerError, match="builtin:tiny"):
        load_tokenizer("builtin:huge")
    assert issubclass(TokenizerError, ValueError)


def test_from_dir_reads_special_ids_from_config(tmp_path):
    load_tokenizer("builtin:tiny").inner.save(str(tmp_path / "tokenizer.json"))
    tok = Tokenizer.from_dir(tmp_path)
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (None, None, None)
    config = {"bos_token_id": 0, "text_config": {"eos_token_id": 1, "pad_token_id": 2}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    tok = load_tokenizer(str(tmp_path))
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (0, 1, 2)
