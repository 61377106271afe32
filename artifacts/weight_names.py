"""The checkpoint's name table: every tensor a V4.1 checkpoint holds, with dtype, shape and kind.

Follows model-spec §4.1/§4.2 (global and per-layer tensors) and §5 (DSpark ``mtp.{k}.*``). Names
have no ``model.`` prefix. Quantized matrices are stored as ``<base>.weight`` + ``<base>.scale``:

    kind        dtype on disk       shape                     companion ``.scale``
    fp8         float8_e4m3fn       [O, I]                    fp8_scale [ceil(O/32), ceil(I/32)]
    fp4         int8 (2 e2m1/byte)  [O, I/2]                  fp4_scale [O, I/32]
    fp8_rows    float8_e4m3fn       [R, C]  (engram tables)   fp8_rows_scale [R, C/32]
    bf16 / f32  bfloat16 / float32  as listed                 none

Scales are ``float8_e8m0fnu`` (ue8m0). Which tensors a layer owns follows its role in the schedule
(model-spec §1.2, ``LayerSpec.mode``); this module only lists names and shapes, it reads no files.

It lives in ``artifacts`` because it is part of the planner/runtime contract: the planner's shard
map (``planner/passes/shard_map.py``) classifies these names and counts their bytes per rank, the
runtime's checkpoint reader and writer use the same table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from deepinfer.artifacts.model_spec import FP4_EXPERT_BLOCK, FP8_BLOCK, LayerSpec, ModelSpec

KIND_FP8 = "fp8"
KIND_FP8_SCALE = "fp8_scale"
KIND_FP4 = "fp4"
KIND_FP4_SCALE = "fp4_scale"
KIND_FP8_ROWS = "fp8_rows"
KIND_FP8_ROWS_SCALE = "fp8_rows_scale"
KIND_BF16 = "bf16"
KIND_F32 = "f32"
QUANTIZED_KINDS = (KIND_FP8, KIND_FP4, KIND_FP8_ROWS)
SCALE_KINDS = (KIND_FP8_SCALE, KIND_FP4_SCALE, KIND_FP8_ROWS_SCALE)

# Prefixes of tensors the text backbone loader recognises and skips (model-spec §4.1).
SKIPPED_PREFIXES = ("vision.", "aligner.", "mtp.")
IMAGE_EMBEDDING_NAMES = ("image_start", "image_end", "image_newline")
DSPARK_PREFIX = "mtp."

# engram.q_weight / k_weight: model-spec §4.2 says "BF16 or F32 [?]" (open question 5); we use F32.
ENGRAM_QK_DTYPE = torch.float32


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the checkpoint as stored on disk.

    ``shape`` is the stored shape (packed for fp4); ``logical_shape`` is the dequantized one.
    ``is_backbone`` is False for DSpark ``mtp.*`` tensors and the image embeddings.
    """

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    kind: str
    is_backbone: bool = True

    @property
    def logical_shape(self) -> tuple[int, ...]:
        """Shape after dequantization: fp4 unpacks two columns per stored byte."""
        if self.kind == KIND_FP4:
            return (self.shape[0], 2 * self.shape[1])
        return self.shape

    @property
    def num_bytes(self) -> int:
        """Bytes of the stored tensor (every checkpoint dtype has a whole-byte element)."""
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def scale_name(self) -> str | None:
        """Name of the companion ``.scale`` tensor of a quantized weight, else None."""
        if self.kind not in QUANTIZED_KINDS:
            return None
        return self.name.removesuffix(".weight") + ".scale"


def is_skipped_name(name: str) -> bool:
    """True for tensors the text backbone loader recognises but does not load.

    These are the vision tower (``vision.*``), its aligner (``aligner.*``), the DSpark draft head
    (``mtp.*``) and the learned image embeddings (``image_start`` / ``image_end`` /
    ``image_newline``, with or without a ``.weight`` suffix).
    """
    return (name.startswith(SKIPPED_PREFIXES)
            or name.removesuffix(".weight") in IMAGE_EMBEDDING_NAMES)


def is_dspark_name(name: str) -> bool:
    """True for DSpark draft-head tensors (``mtp.{k}.*``)."""
    return name.startswith(DSPARK_PREFIX)


def expected_tensors(spec: ModelSpec, include_dspark: bool = True) -> dict[str, TensorSpec]:
    """Every tensor a checkpoint for ``spec`` holds, in a stable order (weights next to scales).

    Order: ``embed``, ``layers.0..L-1``, ``norm``, ``head``, the image embeddings (only when the
    spec has a vision tower), then the DSpark stages ``mtp.0..K-1`` (when ``include_dspark``).
    """
    table = _Table()
    d = spec.hidden_size
    table.add("embed.weight", KIND_BF16, (spec.vocab_size, d))
    for layer in spec.backbone_layers:
        _add_block(table, spec, layer, f"layers.{layer.layer_id}.", spec.n_routed_experts)
    table.add("norm.weight", KIND_BF16, (d,))
    table.add("head.weight", KIND_BF16, (spec.vocab_size, d))
    if spec.has_vision:
        for name in IMAGE_EMBEDDING_NAMES:
            table.add(name, KIND_BF16, (d,), is_backbone=False)
    if include_dspark:
        _add_dspark(table, spec)
    return table.specs


# ---------------------------------------------------------------------------------------------
# Per-block tensors (model-spec §4.2)
# ---------------------------------------------------------------------------------------------


def _add_block(table: _Table, spec: ModelSpec, layer: LayerSpec, prefix: str,
               num_experts: int) -> None:
    """Norms, mHC parameters, attention (gated by the layer's role), MoE and engram."""
    d, n = spec.hidden_size, spec.hc_mult
    table.add(prefix + "attn_norm.weight", KIND_BF16, (d,))
    table.add(prefix + "ffn_norm.weight", KIND_BF16, (d,))
    for site in ("attn", "ffn"):
        table.add(prefix + f"hc_{site}_fn", KIND_F32, ((2 + n) * n, n * d))
        table.add(prefix + f"hc_{site}_base", KIND_F32, ((2 + n) * n,))
        table.add(prefix + f"hc_{site}_scale", KIND_F32, (3,))
    _add_attention(table, spec, layer, prefix + "attn.")
    _add_moe(table, spec, prefix + "ffn.", num_experts, with_bias_vl=not layer.is_dspark)
    if layer.is_engram:
        _add_engram(table, spec, spec.engram_slot(layer.layer_id), prefix + "engram.")


def _add_attention(table: _Table, spec: ModelSpec, layer: LayerSpec, prefix: str) -> None:
    """Every layer: Q/KV/O projections, norms and sink; Full: compressor + index keys;
    Full and Reindex: indexer queries and head weights."""
    d, dh = spec.hidden_size, spec.head_dim
    q_width = spec.num_attention_heads * dh
    table.add(prefix + "wq_a.weight", KIND_FP8, (spec.q_lora_rank, d))
    table.add(prefix + "q_norm.weight", KIND_BF16, (spec.q_lora_rank,))
    table.add(prefix + "wq_b.weight", KIND_FP8, (q_width, spec.q_lora_rank))
    table.add(prefix + "wkv.weight", KIND_FP8, (dh, d))
    table.add(prefix + "kv_norm.weight", KIND_BF16, (dh,))
    table.add(prefix + "wo_a.weight", KIND_FP8,
              (spec.o_groups * spec.o_lora_rank, q_width // spec.o_groups))
    table.add(prefix + "wo_b.weight", KIND_FP8, (d, spec.o_groups * spec.o_lora_rank))
    table.add(prefix + "attn_sink", KIND_F32, (spec.num_attention_heads,))
    if layer.owns_compressor:
        table.add(prefix + "compressor.wkv.weight", KIND_BF16, (dh, d))
        if layer.compress_ratio > 1:
            table.add(prefix + "compressor.wgate.weight", KIND_BF16, (dh, d))
        table.add(prefix + "compressor.norm.weight", KIND_BF16, (dh,))
    if layer.owns_index_keys:
        table.add(prefix + "indexer.wk.weight", KIND_BF16, (spec.index_head_dim, dh))
        table.add(prefix + "indexer.k_norm.weight", KIND_BF16, (spec.index_head_dim,))
    if layer.owns_indexer:
        table.add(prefix + "indexer.wq_b.weight", KIND_FP8,
                  (spec.index_n_heads * spec.index_head_dim, spec.q_lora_rank))
        table.add(prefix + "indexer.weights_proj.weight", KIND_BF16, (spec.index_n_heads, d))


def _add_moe(table: _Table, spec: ModelSpec, prefix: str, num_experts: int,
             with_bias_vl: bool) -> None:
    """Router (weight, bias, image bias), shared experts (FP8) and routed experts (FP4)."""
    d, inter = spec.hidden_size, spec.moe_intermediate_size
    table.add(prefix + "gate.weight", KIND_BF16, (num_experts, d))
    table.add(prefix + "gate.bias", KIND_F32, (num_experts,))
    if with_bias_vl:
        table.add(prefix + "gate.bias_vl", KIND_F32, (num_experts,))
    shared = spec.n_shared_experts * inter
    if spec.n_shared_experts:
        table.add(prefix + "shared_experts.w1.weight", KIND_FP8, (shared, d))
        table.add(prefix + "shared_experts.w2.weight", KIND_FP8, (d, shared))
        table.add(prefix + "shared_experts.w3.weight", KIND_FP8, (shared, d))
    for e in range(num_experts):
        table.add(prefix + f"experts.{e}.w1.weight", KIND_FP4, (inter, d))
        table.add(prefix + f"experts.{e}.w2.weight", KIND_FP4, (d, inter))
        table.add(prefix + f"experts.{e}.w3.weight", KIND_FP4, (inter, d))


def _add_engram(table: _Table, spec: ModelSpec, slot: int, prefix: str) -> None:
    """FP8 row table, FP8 key/value projection, and the per-stream q/k weights."""
    d, n = spec.hidden_size, spec.hc_mult
    hash_width = (spec.engram_max_ngram_size - 1) * spec.engram_n_heads * spec.engram_head_dim
    table.add(prefix + "embed.weight", KIND_FP8_ROWS,
              (spec.engram_num_embeddings[slot], spec.engram_head_dim))
    table.add(prefix + "wkv.weight", KIND_FP8, (d * (n + 1), hash_width))
    table.add(prefix + "q_weight", KIND_F32, (n, d), dtype=ENGRAM_QK_DTYPE)
    table.add(prefix + "k_weight", KIND_F32, (n, d), dtype=ENGRAM_QK_DTYPE)


def _add_dspark(table: _Table, spec: ModelSpec) -> None:
    """DSpark stages (model-spec §5): ratio-0 blocks with their own MoE, plus stage heads.

    Assumed names: ``mtp.0.main_norm.weight`` and ``mtp.{last}.norm.weight`` (the spec lists
    "main_norm" / "norm"); DSpark gates have no ``bias_vl`` (the spec says "no image bias").
    """
    d, rank = spec.hidden_size, spec.dspark_markov_rank
    stages = spec.layers[spec.num_hidden_layers:]
    table.is_backbone = False
    for k, layer in enumerate(stages):
        prefix = f"mtp.{k}."
        if k == 0:
            table.add(prefix + "main_proj.weight", KIND_FP8,
                      (d, len(spec.dspark_target_layer_ids) * d))
            table.add(prefix + "main_norm.weight", KIND_BF16, (d,))
        _add_block(table, spec, layer, prefix, spec.dspark_n_routed_experts)
        if k == len(stages) - 1:
            table.add(prefix + "norm.weight", KIND_BF16, (d,))
            table.add(prefix + "markov_head.embed.weight", KIND_BF16, (spec.vocab_size, rank))
            table.add(prefix + "markov_head.head.weight", KIND_BF16, (spec.vocab_size, rank))
            table.add(prefix + "confidence_head.proj.weight", KIND_BF16, (1, d + rank))
    table.is_backbone = True


# ---------------------------------------------------------------------------------------------
# Table building
# ---------------------------------------------------------------------------------------------

_KIND_DTYPE = {
    KIND_FP8: torch.float8_e4m3fn,
    KIND_FP4: torch.int8,
    KIND_FP8_ROWS: torch.float8_e4m3fn,
    KIND_BF16: torch.bfloat16,
    KIND_F32: torch.float32,
}


class _Table:
    """An ordered name -> TensorSpec map; quantized weights bring their ``.scale`` along.

    ``is_backbone`` is the flag given to tensors added from now on (False while adding DSpark).
    """

    def __init__(self) -> None:
        self.specs: dict[str, TensorSpec] = {}
        self.is_backbone = True

    def add(self, name: str, kind: str, logical_shape: tuple[int, ...],
            dtype: torch.dtype | None = None, is_backbone: bool | None = None) -> None:
        """Add ``name``; ``logical_shape`` is the dequantized [O, I] shape for quantized kinds."""
        if name in self.specs:
            raise AssertionError(f"duplicate tensor name {name}")
        if is_backbone is None:
            is_backbone = self.is_backbone
        stored, scale = _stored_shapes(kind, logical_shape, name)
        self.specs[name] = TensorSpec(name, dtype or _KIND_DTYPE[kind], stored, kind, is_backbone)
        if scale is not None:
            scale_name = name.removesuffix(".weight") + ".scale"
            self.specs[scale_name] = TensorSpec(scale_name, torch.float8_e8m0fnu, scale,
                                                kind + "_scale", is_backbone)


def _stored_shapes(kind: str, shape: tuple[int, ...],
                   name: str) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """(stored weight shape, scale shape or None) of a tensor with logical ``shape``."""
    if kind == KIND_FP8:
        rows, cols = shape
        return shape, (-(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK))
    if kind == KIND_FP4:
        rows, cols = shape
        if cols % FP4_EXPERT_BLOCK:
            raise ValueError(f"{name}: FP4 input width {cols} is not a multiple of "
                             f"{FP4_EXPERT_BLOCK}")
        return (rows, cols // 2), (rows, cols // FP4_EXPERT_BLOCK)
    if kind == KIND_FP8_ROWS:
        rows, cols = shape
        if cols % FP8_BLOCK:
            raise ValueError(f"{name}: engram row width {cols} is not a multiple of {FP8_BLOCK}")
        return shape, (rows, cols // FP8_BLOCK)
    return shape, None

