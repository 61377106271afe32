"""The synthetic tokenizer of the released-size built-ins: ids, engram key count, round trips."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tokenizers import pre_tokenizers

from deepinfer.artifacts.model_spec import load_model_spec
from deepinfer.runtime.model_loader import engram_token_map
from deepinfer.runtime.synthetic_tokenizer import (
    BYTE_CHARS,
    SyntheticTokenizerError,
    synthetic_tokenizer,
)
from deepinfer.runtime.tokenizer import (
    Tokenizer,
    TokenizerError,
    build_engram_token_map,
    load_tokenizer,
)

RELEASED = ["builtin:v41-flash", "builtin:v41-flash-slice"]


@pytest.fixture(scope="module", params=RELEASED)
def released(request) -> tuple[str, Tokenizer]:
    return request.param, load_tokenizer(request.param)


@pytest.fixture(scope="module")
def released_map(released) -> torch.Tensor:
    """The model loader's engram token map (it raises unless the key count matches)."""
    name, tok = released
    return engram_token_map(load_model_spec(name), tok)


def test_vocab_size_and_special_ids(released):
    name, tok = released
    spec = load_model_spec(name)
    assert tok.vocab_size == spec.vocab_size == 129280
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (0, 1, 2)
    expected = {0: "<|bos|>", 1: "<|eos|>", 2: "<|pad|>", 128799: "<|noise|>", 129264: "<|image|>"}
    assert (spec.dspark_noise_token_id, spec.image_token_id) == (128799, 129264)
    for token_id, text in expected.items():
        assert tok.id_to_token(token_id) == text
        assert tok.encode(text) == [token_id]
        assert tok.decode([token_id]) == ""
        assert tok.decode([token_id], skip_special_tokens=False) == text
    assert tok.id_to_token(129279) is not None
    assert tok.id_to_token(129280) is None


def test_engram_map_has_the_configs_key_count(released, released_map):
    name, tok = released
    assert load_model_spec(name).engram_compressed_vocab_size == 99092
    assert released_map.shape == (129280,) and released_map.dtype == torch.int64
    assert torch.unique(released_map).numel() == 99092
    assert int(released_map.max()) == 99091


def test_case_and_space_variants_share_a_key(released, released_map):
    _, tok = released
    keys = {}
    for text in ["the", " the", "The", " The", "a", " a", "A", " A", "é", "e", "  ", "\n\n", " "]:
        ids = tok.encode(text)
        assert len(ids) == 1, (text, ids)
        keys[text] = int(released_map[ids[0]])
    assert keys["the"] == keys[" the"] == keys["The"] == keys[" The"]
    assert keys["a"] == keys[" a"] == keys["A"] == keys[" A"]
    assert keys["é"] == keys["e"]
    assert keys["  "] == keys["\n\n"] == keys[" "]
    assert len({keys["the"], keys["a"], keys["e"], keys[" "]}) == 4


@pytest.mark.parametrize(
    "text",
    [
        "the quick brown fox, jumps over 12 lazy dogs.",
        "The Quick Brown Fox, JUMPS over 1,234,567.89 lazy dogs!",
        "Line one\n\tLine two\r\n  (indented) <tags> & 'quotes' \"too\"; 100% ~done~ {x: [1, 2]}",
        "def f(x):\n    return x ** 2  # comment\n\n\n",
        "héllo wörld, naïve café 🦊 日本語 \x00\x07\x7f",
        "",
    ],
)
def test_round_trip(released, text):
    _, tok = released
    ids = tok.encode(text)
    assert all(0 <= i < 129280 for i in ids)
    assert tok.decode(ids) == text


def test_english_encodes_into_word_pieces(released):
    _, tok = released
    text = "the quick brown fox jumps over the lazy dog while engineers measure latency"
    ids = tok.encode(text)
    pieces = [tok.decode([i]) for i in ids]
    assert len(ids) <= len(text) // 2, pieces  # bytes alone would be one id per character
    assert sum(len(p.strip()) >= 2 for p in pieces) >= len(pieces) * 3 // 4, pieces


def test_byte_table_is_the_byte_level_alphabet():
    assert len(BYTE_CHARS) == 256
    assert set(BYTE_CHARS) == set(pre_tokenizers.ByteLevel.alphabet())


def test_builds_are_identical():
    spec = load_model_spec("builtin:v41-flash-slice")
    assert synthetic_tokenizer(spec).inner.to_str() == synthetic_tokenizer(spec).inner.to_str()


def test_small_config_gets_the_exact_key_count():
    spec = dataclasses.replace(load_model_spec("builtin:v41-flash"), vocab_size=6000,
                               engram_compressed_vocab_size=3000, dspark_noise_token_id=5000,
                               image_token_id=5999, pad_token_id=1)  # pad shares eos's id
    tok = synthetic_tokenizer(spec)
    assert tok.vocab_size == 6000
    assert tok.id_to_token(1) == "<|eos|>" and tok.id_to_token(2) != "<|pad|>"
    assert build_engram_token_map(tok)[1] == 3000
    assert tok.decode(tok.encode("Hello, World 42")) == "Hello, World 42"


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"engram_compressed_vocab_size": 129281}, "engram_compressed_vocab_size is 129281"),
        ({"engram_compressed_vocab_size": 100}, "engram_compressed_vocab_size is 100"),
        ({"vocab_size": 200, "engram_compressed_vocab_size": 150, "dspark_noise_token_id": 3,
          "image_token_id": 4}, "vocab_size 200 is too small"),
        ({"image_token_id": 129280}, "<|image|> has id 129280"),
        ({"vocab_size": 20000, "engram_compressed_vocab_size": 300, "dspark_noise_token_id": 3,
          "image_token_id": 4}, "space and case variants"),
    ],
)
def test_unmeetable_configs_raise(changes, match):
    spec = dataclasses.replace(load_model_spec("builtin:v41-flash"), **changes)
    with pytest.raises(SyntheticTokenizerError, match=match):
        synthetic_tokenizer(spec)
    assert issubclass(SyntheticTokenizerError, TokenizerError)  # the CLI reports it as a user error


def test_checkpoint_without_tokenizer_file_still_errors(tmp_path):
    (tmp_path / "config.json").write_text('{"bos_token_id": 0, "eos_token_id": 1}')
    with pytest.raises(TokenizerError, match="tokenizer.json.*not found"):
        load_tokenizer(str(tmp_path))
