"""Tokenizer loading and the engram token map (model-spec §2.9 "Hashing", offline part).

``Tokenizer`` wraps a HuggingFace ``tokenizers.Tokenizer`` read from a checkpoint's
``tokenizer.json``; ``build_engram_token_map`` derives the engram's token id -> compressed id map
from it. The map must match the one the model was trained with bit for bit, so the key
normalization runs through the same Rust ``tokenizers`` normalizers as the reference (their
Unicode tables, their whitespace set for ``Strip``, their per-character ``Lowercase``, and their
``StripAccents``, which drops every General_Category Mark character: Mn, Mc and Me).
"""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

import tokenizers
import torch
from tokenizers import Regex, normalizers

from deepinfer.artifacts.model_spec import load_model_spec

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "config.json"
BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = ("tiny",)  # built-in models that ship a tokenizer file
# Released-size built-ins (config only): their tokenizer is built by synthetic_tokenizer.py.
SYNTHETIC_TOKENIZER_MODELS = ("v41-flash", "v41-flash-slice")

_REPLACEMENT_CHAR = "\ufffd"
# Shields a token that is exactly " " from Strip (it would become empty and merge with other
# tokens); restored to " " afterwards. As in the reference, a literal U+E000 also becomes " ".
_SENTINEL = "\ue000"
_ENGRAM_KEY_NORMALIZER = normalizers.Sequence(
    [
        normalizers.NFKC(),
        normalizers.NFD(),
        normalizers.StripAccents(),
        normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), _SENTINEL),
        normalizers.Strip(),
        normalizers.Replace(_SENTINEL, " "),
    ]
)


class TokenizerError(ValueError):
    """A tokenizer file is missing or unusable; the message names the path and what was expected."""


class Tokenizer:
    """Text <-> token ids, plus the special ids the engine needs.

    Attributes:
        bos_id, eos_id, pad_id: special token ids, or None when the checkpoint does not say.
    """

    def __init__(
        self,
        inner: tokenizers.Tokenizer,
        *,
        bos_id: int | None = None,
        eos_id: int | None = None,
        pad_id: int | None = None,
    ) -> None:
        self.inner = inner
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.pad_id = pad_id

    @classmethod
    def from_file(cls, path: str | Path, **special_ids: int | None) -> Tokenizer:
        """Load a ``tokenizers`` JSON file; raises ``TokenizerError`` if missing or unparseable."""
        path = Path(path)
        if not path.is_file():
            raise TokenizerError(
                f"{path}: tokenizer file not found; expected a HuggingFace tokenizers JSON file "
                f"('{TOKENIZER_FILE}' in the checkpoint directory)"
            )
        try:
            inner = tokenizers.Tokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises a bare Exception on bad JSON
            raise TokenizerError(
                f"{path}: cannot parse as a HuggingFace tokenizers JSON file "
                f"(as written by tokenizers.Tokenizer.save): {err}"
            ) from err
        return cls(inner, **special_ids)

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        """Load ``<path>/tokenizer.json``; special ids come from ``<path>/config.json`` if present.

        The config's ``bos_token_id``/``eos_token_id``/``pad_token_id`` are read at top level,
        falling back to its ``text_config``.
        """
        path = Path(path)
        if not path.is_dir():
            raise TokenizerError(
                f"{path}: not a directory; expected a checkpoint directory containing "
                f"'{TOKENIZER_FILE}'"
            )
        return cls.from_file(path / TOKENIZER_FILE, **_special_ids_from_config(path / CONFIG_FILE))

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added (special) tokens included."""
        return self.inner.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; the tokenizer's post-processor (e.g. BOS) only if asked."""
        return self.inner.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; special tokens are dropped unless ``skip_special_tokens`` is False."""
        return self.inner.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        """The raw vocabulary string of ``token_id`` (e.g. ``"<0xC3>"``), None if out of range."""
        return self.inner.id_to_token(token_id)

    def token_to_id(self, token: str) -> int | None:
        return self.inner.token_to_id(token)


def _special_ids_from_config(config_path: Path) -> dict[str, int | None]:
    if not config_path.is_file():
        return {}
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TokenizerError(f"{config_path}: cannot read as JSON model config: {err}") from err
    text_config = config.get("text_config") or {}
    return {
        f"{name}_id": config.get(f"{name}_token_id", text_config.get(f"{name}_token_id"))
        for name in ("bos", "eos", "pad")
    }


def load_tokenizer(model_path: str) -> Tokenizer:
    """``"builtin:tiny"`` -> the shipped tiny tokenizer; ``"builtin:v41-flash"`` and
    ``"builtin:v41-flash-slice"`` -> a synthetic tokenizer of their config (no real one ships);
    anything else is a checkpoint directory, which must bring its ``tokenizer.json``."""
    if model_path.startswith(BUILTIN_PREFIX):
        name = model_path[len(BUILTIN_PREFIX) :]
        if name in SYNTHETIC_TOKENIZER_MODELS:
            # Imported here: synthetic_tokenizer builds on this module.
            from deepinfer.runtime.synthetic_tokenizer import synthetic_tokenizer

            return synthetic_tokenizer(load_model_spec(model_path))
        if name not in BUILTIN_MODELS:
            raise TokenizerError(
                f"{model_path}: no built-in tokenizer (built-in models with one: "
                + ", ".join(BUILTIN_PREFIX + m for m in BUILTIN_MODELS + SYNTHETIC_TOKENIZER_MODELS)
                + "); run the model from a checkpoint directory that has tokenizer.json"
            )
        builtin_dir = importlib.resources.files("deepinfer.artifacts") / "builtin" / name
        with importlib.resources.as_file(builtin_dir) as directory:
            return Tokenizer.from_dir(directory)
    return Tokenizer.from_dir(model_path)


def normalize_engram_key(text: str) -> str:
    """The engram key of a token's decoded text (model-spec §2.9).

    NFKC -> NFD -> strip accents (drop combining marks) -> lowercase -> collapse runs of
    ``[ \\t\\r\\n]`` to one " " -> strip surrounding whitespace, except that a text that is exactly
    " " at that point stays " ". An empty result falls back to ``text`` itself.
    """
    return _ENGRAM_KEY_NORMALIZER.normalize_str(text) or text


def build_engram_token_map(tok: Tokenizer) -> tuple[torch.Tensor, int]:
    """Token id -> compressed id for the engram hash (model-spec §2.9, "offline, once").

    Each id is decoded alone with ``skip_special_tokens=False``. A text containing U+FFFD (a
    fragment of a multi-byte character) is keyed by its raw vocabulary string; any other text by
    ``normalize_engram_key``. Compressed ids are assigned in first-seen order of keys.

    Returns:
        ``(token_map, num_compressed)``: token_map ``(tok.vocab_size,) int64``, values in
        ``[0, num_compressed)``.
    """
    key_to_compressed: dict[str, int] = {}
    compressed_ids: list[int] = []
    for token_id in range(tok.vocab_size):
        text = tok.decode([token_id], skip_special_tokens=False)
        if _REPLACEMENT_CHAR in text:
            key = tok.id_to_token(token_id) or text
        else:
            key = normalize_engram_key(text)
        compressed_ids.append(key_to_compressed.setdefault(key, len(key_to_compressed)))
    return torch.tensor(compressed_ids, dtype=torch.int64), len(key_to_compressed)
