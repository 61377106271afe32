"""Build a ready model from a model path: spec, tokenizer, engram token map, weights.

``model``: ``builtin:tiny`` or a checkpoint directory in the released layout (model-spec §4).
``weights``: ``auto`` (read the checkpoint; built-in models have none, so synthetic) or
``synthetic`` (seeded weights built in memory, no files). The module tree is built on the meta
device (:func:`build_model`) and the checkpoint tensors are assigned into it as stored: FP8
matrices and engram tables as codes + ue8m0 scales, routed experts as MXFP4 stacks
(``runtime/model/params.py``, ``expert_slots.py``). Nothing is dequantized at load; the ops
dequantize on the fly, exactly, so results equal the fully dequantized model's bit for bit.

``load_model`` holds the whole checkpoint on the host at once (small models: tests, demos, the
oracle of the rank loader). An engine's rank loads through ``runtime/shard_loader.py`` instead,
which streams its tensors one at a time straight onto the plan's device.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from deepinfer.artifacts.model_spec import ModelSpec, load_model_spec
from deepinfer.kernels.registry import KernelSet
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41
from deepinfer.runtime.model.params import Fp8RowTable, model_bytes
from deepinfer.runtime.tokenizer import Tokenizer, build_engram_token_map, load_tokenizer
from deepinfer.runtime.weights import read_stored_tensors, synthetic_stored_tensors

WEIGHT_SOURCES = ("auto", "synthetic")


@dataclass
class LoadedModel:
    spec: ModelSpec
    tokenizer: Tokenizer
    model: DeepseekV41

    def model_bytes(self) -> int:
        """Resident weight bytes (quantized tensors as stored): ``params.model_bytes``."""
        return model_bytes(self.model)


def build_model(spec: ModelSpec, kernels: KernelSet | None = None,
                engram_token_map: torch.Tensor | None = None) -> DeepseekV41:
    """The module tree on the meta device, with the holders that keep weights as stored.

    The engram tables become ``Fp8RowTable``s (FP8 rows + scales; ``weight[ids]`` gathers,
    then dequantizes). Linear and expert holders take their form from the loaded tensors.
    """
    with torch.device("meta"):
        net = DeepseekV41(spec, kernels, engram_token_map=engram_token_map)
        for block in net.layers:
            if hasattr(block, "engram"):
                rows, dim = block.engram.embed.weight.shape
                block.engram.embed = Fp8RowTable(rows, dim)
    return net


def engram_token_map(spec: ModelSpec, tok: Tokenizer) -> torch.Tensor:
    """(vocab_size,) int64 token id -> compressed id, from the tokenizer (model-spec §2.9).

    Ids the model has but the tokenizer does not (vocab padding) map to the pad token's
    compressed id. The number of distinct compressed ids must equal the config's
    ``engram_compressed_vocab_size``, or the hash tables would be indexed with other ids than
    they were trained with.
    """
    token_map, num_compressed = build_engram_token_map(tok)
    if num_compressed != spec.engram_compressed_vocab_size:
        raise ValueError(f"field 'engram_compressed_vocab_size' is "
                         f"{spec.engram_compressed_vocab_size} but the tokenizer's normalized "
                         f"token map has {num_compressed} distinct ids")
    if token_map.shape[0] > spec.vocab_size:
        raise ValueError(f"the tokenizer has {token_map.shape[0]} ids but field 'vocab_size' is "
                         f"{spec.vocab_size}")
    padded = torch.full((spec.vocab_size,), int(token_map[spec.engram_pad_token_id]))
    padded[: token_map.shape[0]] = token_map
    return padded


def load_model(model: str, weights: str = "auto", seed: int = 0,
               kernels: KernelSet | None = None) -> LoadedModel:
    """Spec, tokenizer and model with weights in place (see the module docstring)."""
    if weights not in WEIGHT_SOURCES:
        raise ValueError(f"weights must be one of {', '.join(WEIGHT_SOURCES)}, got {weights!r}")
    spec = load_model_spec(model)
    tok = load_tokenizer(model)
    token_map = engram_token_map(spec, tok) if spec.engram_layer_ids else None
    if weights == "synthetic" or model.startswith("builtin:"):
        tensors = synthetic_stored_tensors(spec, seed)
    else:
        tensors = read_stored_tensors(Path(model), spec)
    net = build_model(spec, kernels, token_map)
    net.load_weights(tensors)
    return LoadedModel(spec, tok, net)
