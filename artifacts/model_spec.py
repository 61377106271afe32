"""ModelSpec: the frozen description of a DeepSeek-V4.1-Flash model, and its per-layer schedule.

Parsed from the released Hugging Face ``config.json`` (composite: ``text_config``,
``vision_config``, ``quantization_config``) or from the reference ``inference/config.json`` (flat,
other key names; model-spec §1.1). Every inconsistency is a :class:`ConfigError` that names the
file, the field and what was expected. The per-layer schedule (model-spec §1.2) is derived here
once, so the planner and the runtime read the same table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Attention modes of a layer (model-spec §1.2).
MODE_WINDOW = "window"  # ratio 0: sliding window only
MODE_FULL = "full"  # owns a compressor and an indexer (a KV source)
MODE_REINDEX = "reindex"  # own indexer queries over another layer's index keys
MODE_REUSE = "reuse"  # reads another layer's compressed KV and top-k

FP8_BLOCK = 32  # dense FP8 weight tiles are 32x32; activations are quantized per 32
FP4_EXPERT_BLOCK = 32  # MXFP4 expert scales: one per 32 input columns
KV_FP4_BLOCK = 16  # compressed KV latent: FP4 with one e4m3 scale per 16


class ConfigError(ValueError):
    """A model config that cannot describe a V4.1 model; the message names file and field."""


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """One attention/MoE block of the schedule (backbone layers, then DSpark stages)."""

    layer_id: int
    compress_ratio: int  # tokens per compressed entry; 0 = sliding window only
    mode: str  # MODE_WINDOW | MODE_FULL | MODE_REINDEX | MODE_REUSE
    kv_source: int | None  # layer whose compressed KV (and index keys) this layer reads
    index_source: int | None  # layer whose published top-k this layer reads
    candidate_source: int | None  # layer whose candidate-block mask restricts this indexer
    is_candidate_source: bool  # this layer publishes the candidate-block mask
    is_engram: bool  # an engram module runs before this block's attention site
    is_dspark: bool  # a DSpark draft stage (not part of the backbone forward)
    is_dspark_tap: bool  # DSpark reads the mean over streams of this layer's input

    @property
    def owns_compressor(self) -> bool:
        return self.mode == MODE_FULL

    @property
    def owns_index_keys(self) -> bool:
        """Owns ``indexer.wk`` / ``indexer.k_norm`` and publishes index keys."""
        return self.mode == MODE_FULL

    @property
    def owns_indexer(self) -> bool:
        """Owns ``indexer.wq_b`` / ``indexer.weights_proj`` and scores keys itself."""
        return self.mode in (MODE_FULL, MODE_REINDEX)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Hyper-parameters of a DeepSeek-V4.1 text model (names follow HF ``text_config``)."""

    vocab_size: int  # token ids 0 .. vocab_size-1
    hidden_size: int  # residual width D of one hc stream
    num_hidden_layers: int  # backbone layers (DSpark stages come after)
    num_attention_heads: int  # query heads H; one shared K=V latent head
    head_dim: int  # Dh: width of a query head and of the K=V latent
    qk_rope_head_dim: int  # RoPE on the LAST this-many channels of each head
    q_lora_rank: int  # low-rank query width
    o_groups: int  # groups of the grouped low-rank output projection
    o_lora_rank: int  # per-group output rank
    swiglu_limit: float  # clamp of the SwiGLU gate/up projections
    rms_norm_eps: float  # every RMS-type normalization
    rope_theta: float  # RoPE base of ratio-0 layers
    compress_rope_theta: float  # RoPE base of ratio>0 layers (with YaRN)
    rope_factor: float  # YaRN factor (ratio>0 layers only)
    rope_original_max_position: int  # YaRN original_max_position_embeddings
    rope_beta_fast: float  # YaRN beta_fast
    rope_beta_slow: float  # YaRN beta_slow
    max_position_embeddings: int  # longest supported context
    n_routed_experts: int  # routed experts per MoE layer
    n_shared_experts: int  # always-on experts per MoE layer
    num_experts_per_tok: int  # routed experts chosen per token
    moe_intermediate_size: int  # width of every expert (routed and shared)
    routed_scaling_factor: float  # multiplies the normalized routing weights
    gate_temp: float  # router logit temperature
    norm_topk_prob: bool  # normalize the chosen routing weights
    sliding_window: int  # window ring length in tokens, every layer
    compress_ratios: tuple[int, ...]  # per layer, backbone then DSpark stages
    kv_source_layer_ids: tuple[int, ...]  # "Full" layers that own a compressor
    index_source_layer_ids: tuple[int, ...]  # Full + Reindex layers (own indexer queries)
    candidate_source_layer_id: int | None  # publishes the two-level candidate mask
    candidate_topk_blocks: int  # candidate blocks kept per query
    candidate_block_size: int  # compressed entries per candidate block
    index_n_heads: int  # indexer heads
    index_head_dim: int  # indexer head width (RoPE on its last qk_rope_head_dim)
    index_topk: int  # compressed entries selected per query
    hc_mult: int  # mHC streams
    hc_sinkhorn_iters: int  # Sinkhorn iterations of the mHC combination matrix
    hc_eps: float  # mHC epsilon
    engram_layer_ids: tuple[int, ...]  # engram modules run before these layers' attention
    engram_num_embeddings: tuple[int, ...]  # table rows per engram layer
    engram_max_ngram_size: int  # n-grams of order 2 .. this
    engram_vocab_size: int  # hash primes are the primes >= this
    engram_n_heads: int  # hash heads per n-gram order
    engram_head_dim: int  # width of one table row
    engram_pad_token_id: int  # token id whose compressed id pads blocked look-backs
    engram_compressed_vocab_size: int  # distinct ids of the normalized token map
    num_nextn_predict_layers: int  # DSpark stages
    dspark_block_size: int  # tokens drafted per DSpark pass
    dspark_noise_token_id: int  # filler token of a draft block
    dspark_target_layer_ids: tuple[int, ...]  # layers whose inputs DSpark reads
    dspark_markov_rank: int  # rank of the Markov head
    dspark_n_routed_experts: int  # routed experts of each DSpark stage
    dspark_num_experts_per_tok: int  # routed experts chosen per token in DSpark
    bos_token_id: int | None  # beginning of sequence
    eos_token_id: int  # end of sequence
    pad_token_id: int  # padding
    image_token_id: int | None  # every position of an image span carries it
    weight_block_size: tuple[int, int] = (FP8_BLOCK, FP8_BLOCK)  # dense FP8 scale tiles
    expert_dtype: str = "fp4"  # routed-expert storage ("fp4" = MXFP4)
    has_vision: bool = False  # the checkpoint has a vision tower (its weights are skipped)
    layers: tuple[LayerSpec, ...] = field(default=(), compare=False)  # derived schedule

    # ---- derived sizes ---------------------------------------------------------------
    @property
    def num_layers_total(self) -> int:
        """Backbone layers plus DSpark stages."""
        return self.num_hidden_layers + self.num_nextn_predict_layers

    @property
    def backbone_layers(self) -> tuple[LayerSpec, ...]:
        return self.layers[: self.num_hidden_layers]

    @property
    def rope_nope_dim(self) -> int:
        return self.head_dim - self.qk_rope_head_dim

    @property
    def window_record_bytes(self) -> int:
        """FP8 window K=V record: head_dim e4m3 codes + one ue8m0 byte per 32 (528 B released)."""
        return self.head_dim + self.head_dim // FP8_BLOCK

    @property
    def compressed_record_bytes(self) -> int:
        """FP4 compressed K=V entry: head_dim/2 packed e2m1 + one e4m3 per 16 (288 B released)."""
        return self.head_dim // 2 + self.head_dim // KV_FP4_BLOCK

    @property
    def index_key_record_bytes(self) -> int:
        """FP4 index key: index_head_dim/2 packed e2m1 + one ue8m0 per 32 (68 B released)."""
        return self.index_head_dim // 2 + self.index_head_dim // FP8_BLOCK

    @property
    def kv_bytes_per_token(self) -> float:
        """Cache bytes that grow with context, per token: compressed KV + index keys (890 B)."""
        entry_bytes = self.compressed_record_bytes + self.index_key_record_bytes
        return sum(entry_bytes / self.layers[i].compress_ratio for i in self.kv_source_layer_ids)

    @property
    def window_bytes_per_sequence(self) -> int:
        """Fixed per-sequence window rings of the backbone layers."""
        return self.num_hidden_layers * self.sliding_window * self.window_record_bytes

    def engram_slot(self, layer_id: int) -> int:
        """Index of ``layer_id`` in ``engram_layer_ids``."""
        return self.engram_layer_ids.index(layer_id)

    # ---- construction ----------------------------------------------------------------
    @classmethod
    def from_json_file(cls, path: str | Path) -> ModelSpec:
        """Read an HF ``config.json`` or a reference ``inference/config.json``."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path}: file not found (expected a model config.json)") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a JSON object at the top level")
        return cls.from_dict(raw, source=str(path))

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "config") -> ModelSpec:
        """Build from a parsed config (HF composite or reference flat layout)."""
        from deepinfer.artifacts.config_keys import normalize_config

        values = normalize_config(raw, source)
        layers = derive_schedule(values, source)
        return cls(**values, layers=layers)


# Built-in model configs: ``builtin:tiny`` is the tiny V4.1 of model-spec §6.1 (what tests and
# the default topology use); ``builtin:v41-flash`` is the released config (no weights).
BUILTIN_MODELS = {"tiny": "tiny", "v41-flash": "v41-flash", "v41-flash-slice": "v41-flash-slice"}


def builtin_config_path(name: str) -> Path:
    """Path of a built-in model's ``config.json`` (``name`` without the ``builtin:`` prefix)."""
    from importlib.resources import files

    if name not in BUILTIN_MODELS:
        raise ConfigError(f"model 'builtin:{name}': unknown built-in model (expected one of "
                          f"{', '.join('builtin:' + n for n in BUILTIN_MODELS)})")
    return Path(str(files("deepinfer.artifacts") / "builtin" / BUILTIN_MODELS[name] /
                    "config.json"))


def load_model_spec(model: str) -> ModelSpec:
    """``builtin:<name>``, a checkpoint directory, or a path to a ``config.json``."""
    if model.startswith("builtin:"):
        return ModelSpec.from_json_file(builtin_config_path(model.removeprefix("builtin:")))
    return ModelSpec.from_json_file(model)


def derive_schedule(v: dict[str, Any], source: str) -> tuple[LayerSpec, ...]:
    """The per-layer table of model-spec §1.2, with every consistency check of the schedule.

    Rule: a ratio>0 layer reads the compressed KV of the closest KV source <= it (which must
    have the same ratio) and the top-k of the closest index source <= it.
    """
    from deepinfer.artifacts.config_keys import check

    n_back = v["num_hidden_layers"]
    ratios = v["compress_ratios"]
    kv_src = v["kv_source_layer_ids"]
    idx_src = v["index_source_layer_ids"]
    cand = v["candidate_source_layer_id"]

    def fld(name: str) -> str:
        return f"{source}: field '{name}'"

    for name, ids in (("kv_source_layer_ids", kv_src), ("index_source_layer_ids", idx_src)):
        check(list(ids) == sorted(set(ids)), f"{fld(name)}: expected strictly increasing ids, "
              f"got {list(ids)}")
        for i in ids:
            check(0 <= i < n_back, f"{fld(name)}: layer {i} is outside the backbone 0..{n_back-1}")
            check(ratios[i] > 0, f"{fld(name)}: layer {i} has compress_ratios[{i}] = 0; "
                  "a source layer needs ratio > 0")
    for i in kv_src:
        check(i in idx_src, f"{fld('index_source_layer_ids')}: KV source layer {i} must also be "
              f"an index source (it owns the index keys), got {list(idx_src)}")
    if cand is not None:
        check(cand in kv_src, f"{fld('candidate_source_layer_id')}: layer {cand} must be a KV "
              f"source (one of {list(kv_src)})")
    for i in v["dspark_target_layer_ids"]:
        check(0 <= i < n_back, f"{fld('dspark_target_layer_ids')}: layer {i} is outside the "
              f"backbone 0..{n_back-1}")
    for i in v["engram_layer_ids"]:
        check(0 <= i < n_back, f"{fld('engram_layer_ids')}: layer {i} is outside the "
              f"backbone 0..{n_back-1}")

    layers = []
    for i, r in enumerate(ratios):
        is_dspark = i >= n_back
        if is_dspark:
            check(r == 0, f"{fld('compress_ratios')}: DSpark stage layer {i} must have ratio 0, "
                  f"got {r}")
        kv = idx = cs = None
        if r == 0:
            mode = MODE_WINDOW
        else:
            kv = max((s for s in kv_src if s <= i), default=None)
            check(kv is not None, f"{fld('kv_source_layer_ids')}: layer {i} has ratio {r} but no "
                  f"KV source at or before it (sources: {list(kv_src)})")
            check(ratios[kv] == r, f"{fld('compress_ratios')}: layer {i} has ratio {r} but its "
                  f"KV source, layer {kv}, has ratio {ratios[kv]}; a Reuse layer needs a source "
                  "of the same ratio")
            idx = max((s for s in idx_src if s <= i), default=None)
            check(idx is not None and idx >= kv, f"{fld('index_source_layer_ids')}: layer {i} "
                  f"has no index source between its KV source {kv} and itself")
            if i == kv:
                mode = MODE_FULL
            elif i == idx:
                mode = MODE_REINDEX
            else:
                mode = MODE_REUSE
            if cand is not None and idx == i and cand < i and kv == cand:
                cs = cand
        layers.append(LayerSpec(
            layer_id=i, compress_ratio=r, mode=mode, kv_source=kv, index_source=idx,
            candidate_source=cs, is_candidate_source=(i == cand), is_engram=i in
            v["engram_layer_ids"], is_dspark=is_dspark,
            is_dspark_tap=i in v["dspark_target_layer_ids"]))
    return tuple(layers)
