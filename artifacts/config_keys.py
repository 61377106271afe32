"""Reading a model config's keys into ModelSpec fields, with type and consistency checks.

Two layouts (model-spec §1.1): the HF composite ``config.json`` (``text_config`` +
``quantization_config`` + ``vision_config``) and the reference engine's flat
``inference/config.json``, whose keys differ (second column of the table below).
"""

from __future__ import annotations

from typing import Any

# ModelSpec field -> (reference inference/config.json key or None, default or REQUIRED).
REQUIRED = object()
FIELDS: dict[str, tuple[str | None, Any]] = {
    "vocab_size": ("vocab_size", REQUIRED),
    "hidden_size": ("dim", REQUIRED),
    "num_hidden_layers": ("n_layers", REQUIRED),
    "num_attention_heads": ("n_heads", REQUIRED),
    "head_dim": ("head_dim", REQUIRED),
    "qk_rope_head_dim": ("rope_head_dim", REQUIRED),
    "q_lora_rank": ("q_lora_rank", REQUIRED),
    "o_groups": ("o_groups", REQUIRED),
    "o_lora_rank": ("o_lora_rank", REQUIRED),
    "swiglu_limit": ("swiglu_limit", 10.0),
    "rms_norm_eps": ("norm_eps", 1e-20),
    "rope_theta": ("rope_theta", 10000.0),
    "compress_rope_theta": ("compress_rope_theta", 160000.0),
    "max_position_embeddings": ("max_seq_len", 1048576),
    "n_routed_experts": ("n_routed_experts", REQUIRED),
    "n_shared_experts": ("n_shared_experts", 1),
    "num_experts_per_tok": ("n_activated_experts", REQUIRED),
    "moe_intermediate_size": ("moe_inter_dim", REQUIRED),
    "routed_scaling_factor": ("route_scale", 1.0),
    "gate_temp": ("gate_temp", 1.0),
    "norm_topk_prob": (None, True),
    "sliding_window": ("window_size", REQUIRED),
    "compress_ratios": ("compress_ratios", REQUIRED),
    "kv_source_layer_ids": ("kv_source_layers", REQUIRED),
    "index_source_layer_ids": ("index_source_layers", REQUIRED),
    "candidate_source_layer_id": ("candidate_source_layer", None),
    "candidate_topk_blocks": ("candidate_topk_blocks", 2048),
    "candidate_block_size": ("candidate_block_size", 8),
    "index_n_heads": ("index_n_heads", REQUIRED),
    "index_head_dim": ("index_head_dim", REQUIRED),
    "index_topk": ("index_topk", REQUIRED),
    "hc_mult": ("hc_mult", 4),
    "hc_sinkhorn_iters": ("hc_sinkhorn_iters", 20),
    "hc_eps": ("hc_eps", 1e-6),
    "engram_layer_ids": ("engram_layer_ids", ()),
    "engram_num_embeddings": ("engram_num_embeddings", ()),
    "engram_max_ngram_size": ("engram_max_ngram_size", 4),
    "engram_vocab_size": ("engram_vocab_size", 16000000),
    "engram_n_heads": ("engram_n_heads", 8),
    "engram_head_dim": ("engram_head_dim", 256),
    "engram_pad_token_id": ("engram_pad_id", 2),
    "engram_compressed_vocab_size": ("engram_compressed_vocab_size", REQUIRED),
    "num_nextn_predict_layers": ("n_mtp_layers", 0),
    "dspark_block_size": ("dspark_block_size", 5),
    "dspark_noise_token_id": ("dspark_noise_token_id", REQUIRED),
    "dspark_target_layer_ids": ("dspark_target_layer_ids", ()),
    "dspark_markov_rank": ("dspark_markov_rank", 256),
    "dspark_n_routed_experts": ("dspark_n_routed_experts", REQUIRED),
    "dspark_num_experts_per_tok": ("dspark_n_activated_experts", REQUIRED),
}
TUPLE_FIELDS = {"compress_ratios", "kv_source_layer_ids", "index_source_layer_ids",
                "engram_layer_ids", "engram_num_embeddings", "dspark_target_layer_ids"}
FLOAT_FIELDS = {"swiglu_limit", "rms_norm_eps", "rope_theta", "compress_rope_theta",
                "routed_scaling_factor", "gate_temp", "hc_eps"}
# HF spells the engram pad field both ways.
HF_ALIASES = {"engram_pad_token_id": ("engram_pad_token_id", "engram_pad_id")}


def check(cond: bool, message: str) -> None:
    from deepinfer.artifacts.model_spec import ConfigError

    if not cond:
        raise ConfigError(message)


def _typed(name: str, value: Any, where: str) -> Any:
    if name in TUPLE_FIELDS:
        check(isinstance(value, list | tuple) and all(isinstance(x, int) and not isinstance(x, bool)
              for x in value), f"{where}: expected a list of integers, got {value!r}")
        return tuple(value)
    if name in FLOAT_FIELDS:
        check(isinstance(value, int | float) and not isinstance(value, bool),
              f"{where}: expected a number, got {value!r}")
        return float(value)
    if name == "norm_topk_prob":
        check(isinstance(value, bool), f"{where}: expected true or false, got {value!r}")
        return value
    if name == "candidate_source_layer_id" and value is None:
        return None
    check(isinstance(value, int) and not isinstance(value, bool),
          f"{where}: expected an integer, got {value!r}")
    return value


def normalize_config(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """Map either config layout to ModelSpec keyword arguments, checking types and widths."""
    is_flat = "dim" in raw and "n_layers" in raw
    text = raw if is_flat else raw.get("text_config", raw)
    prefix = "" if is_flat or text is raw else "text_config."
    check(isinstance(text, dict), f"{source}: field 'text_config': expected an object")
    out: dict[str, Any] = {}
    for name, (ref_key, default) in FIELDS.items():
        keys = (ref_key,) if is_flat else HF_ALIASES.get(name, (name,))
        key = next((k for k in keys if k is not None and k in text), None)
        where = f"{source}: field '{prefix}{key or keys[0] or name}'"
        if key is None:
            check(default is not REQUIRED, f"{where}: missing (required)")
            out[name] = _typed(name, default, where) if default is not None else None
        else:
            out[name] = _typed(name, text[key], where)
    out.update(_rope(text, is_flat, source, prefix))
    out.update(_top_level(raw, text, is_flat, source))
    _check_widths(out, source, prefix)
    return out


def _rope(text: dict[str, Any], is_flat: bool, source: str, prefix: str) -> dict[str, Any]:
    if is_flat:
        get = {"rope_factor": "rope_factor", "rope_original_max_position": "original_seq_len",
               "rope_beta_fast": "beta_fast", "rope_beta_slow": "beta_slow"}
        return {k: text.get(src, d) for (k, src), d in zip(get.items(), (16, 65536, 32, 1),
                                                            strict=True)}
    rs = text.get("rope_scaling") or {}
    where = f"{source}: field '{prefix}rope_scaling'"
    check(isinstance(rs, dict), f"{where}: expected an object")
    kind = rs.get("rope_type", rs.get("type", "yarn"))
    check(kind == "yarn", f"{where}.rope_type: expected 'yarn', got {kind!r}")
    return {"rope_factor": float(rs.get("factor", 16)),
            "rope_original_max_position": int(rs.get("original_max_position_embeddings", 65536)),
            "rope_beta_fast": float(rs.get("beta_fast", 32)),
            "rope_beta_slow": float(rs.get("beta_slow", 1))}


def _top_level(raw: dict[str, Any], text: dict[str, Any], is_flat: bool,
               source: str) -> dict[str, Any]:
    def pick(key: str, default: Any) -> Any:
        return raw.get(key, text.get(key, default))

    out = {"bos_token_id": pick("bos_token_id", 0), "eos_token_id": pick("eos_token_id", 1),
           "pad_token_id": pick("pad_token_id", 2), "image_token_id": pick("image_token_id", None),
           "has_vision": bool(raw.get("vision_config")) or bool(raw.get("vision_layers"))}
    if is_flat:
        check(raw.get("dtype", "fp8") == "fp8", f"{source}: field 'dtype': expected 'fp8', "
              f"got {raw.get('dtype')!r}")
        out["expert_dtype"] = raw.get("expert_dtype", "fp4")
        out["weight_block_size"] = (32, 32)
        return out
    qc = raw.get("quantization_config") or {}
    where = f"{source}: field 'quantization_config"
    check(isinstance(qc, dict), f"{where}': expected an object")
    if qc:
        check(qc.get("quant_method") == "fp8", f"{where}.quant_method': expected 'fp8', got "
              f"{qc.get('quant_method')!r}")
        check(qc.get("scale_fmt", "ue8m0") == "ue8m0", f"{where}.scale_fmt': expected 'ue8m0', "
              f"got {qc.get('scale_fmt')!r}")
    wbs = qc.get("weight_block_size", [32, 32])
    check(list(wbs) == [32, 32], f"{where}.weight_block_size': V4.1 uses [32, 32] blocks, "
          f"got {wbs}")
    out["weight_block_size"] = (32, 32)
    out["expert_dtype"] = qc.get("expert_dtype", "fp4")
    check(out["expert_dtype"] == "fp4", f"{where}.expert_dtype': expected 'fp4', got "
          f"{out['expert_dtype']!r}")
    return out


def _check_widths(v: dict[str, Any], source: str, prefix: str) -> None:
    """Widths the quantization tiles and the grouped projections require."""

    def fld(name: str) -> str:
        return f"{source}: field '{prefix}{name}'"

    n_total = v["num_hidden_layers"] + v["num_nextn_predict_layers"]
    check(len(v["compress_ratios"]) == n_total,
          f"{fld('compress_ratios')}: expected {n_total} entries (num_hidden_layers "
          f"{v['num_hidden_layers']} + num_nextn_predict_layers {v['num_nextn_predict_layers']}), "
          f"got {len(v['compress_ratios'])}")
    check(all(r >= 0 for r in v["compress_ratios"]),
          f"{fld('compress_ratios')}: ratios must be >= 0, got {list(v['compress_ratios'])}")
    for name, tile in (("hidden_size", 32), ("head_dim", 32), ("q_lora_rank", 32),
                       ("o_lora_rank", 32), ("moe_intermediate_size", 32),
                       ("index_head_dim", 32), ("engram_head_dim", 32)):
        check(v[name] > 0 and v[name] % tile == 0, f"{fld(name)}: expected a positive multiple "
              f"of {tile} (quantization tile), got {v[name]}")
    for name in ("num_attention_heads", "index_n_heads", "n_routed_experts", "num_hidden_layers",
                 "sliding_window", "index_topk", "hc_mult", "vocab_size", "o_groups",
                 "candidate_block_size", "candidate_topk_blocks", "engram_n_heads"):
        check(v[name] > 0, f"{fld(name)}: expected a positive integer, got {v[name]}")
    r = v["qk_rope_head_dim"]
    check(r > 0 and r % 2 == 0 and r <= v["head_dim"] and r <= v["index_head_dim"],
          f"{fld('qk_rope_head_dim')}: expected an even number <= head_dim {v['head_dim']} and "
          f"<= index_head_dim {v['index_head_dim']}, got {r}")
    q_width = v["num_attention_heads"] * v["head_dim"]
    check(q_width % v["o_groups"] == 0 and (q_width // v["o_groups"]) % 32 == 0,
          f"{fld('o_groups')}: num_attention_heads*head_dim = {q_width} must split into "
          f"{v['o_groups']} groups of a multiple of 32")
    check(v["num_attention_heads"] % v["o_groups"] == 0, f"{fld('o_groups')}: "
          f"num_attention_heads {v['num_attention_heads']} must be divisible by {v['o_groups']}")
    check(0 < v["num_experts_per_tok"] <= v["n_routed_experts"],
          f"{fld('num_experts_per_tok')}: expected 1..n_routed_experts "
          f"({v['n_routed_experts']}), got {v['num_experts_per_tok']}")
    check(len(v["engram_num_embeddings"]) == len(v["engram_layer_ids"]),
          f"{fld('engram_num_embeddings')}: expected one entry per engram layer "
          f"({len(v['engram_layer_ids'])}), got {len(v['engram_num_embeddings'])}")
    check(v["engram_max_ngram_size"] >= 2, f"{fld('engram_max_ngram_size')}: expected >= 2, "
          f"got {v['engram_max_ngram_size']}")
    if v["num_nextn_predict_layers"]:
        check(0 < v["dspark_num_experts_per_tok"] <= v["dspark_n_routed_experts"],
              f"{fld('dspark_num_experts_per_tok')}: expected 1..dspark_n_routed_experts")
