"""The torch reference backend: every op, plain torch, runs anywhere; the oracle of all tests."""

from deepinfer.kernels import registry

# Reference ops that read device values on the host (moe_routed_experts loops over the experts
# the batch picked: ``unique`` + ``nonzero``). A decode step running one of them cannot be
# captured as a CUDA graph; the engine then decodes eagerly (tests/runtime/test_batched_decode.py
# checks this list is complete).
HOST_SYNC_OPS = frozenset({"moe_routed_experts"})


def register_all() -> None:
    """Register every reference op under the ``reference`` backend."""
    from deepinfer.kernels import formats
    from deepinfer.kernels.reference import (
        attention,
        attention_fused,
        compressor,
        engram,
        indexer,
        linear,
        mhc,
        moe,
        norm,
        quant,
        rope,
        sampling,
    )

    table = {
        "rms_norm": norm.rms_norm,
        "rms_norm_q8": norm.rms_norm_q8,
        "apply_rope": rope.apply_rope,
        "hc_coeffs": mhc.hc_coeffs,
        "hc_collapse": mhc.hc_collapse,
        "hc_expand": mhc.hc_expand,
        "hc_expand_norm": mhc.hc_expand_norm,
        "sparse_attention_sink": attention.sparse_attention_sink,
        # the decode step's ops over the packed pools (the model calls them; composed refs)
        "sparse_attention_sink_records": attention_fused.sparse_attention_sink_records,
        "index_scores_paged": attention_fused.index_scores_paged,
        # the cache writes: norm + RoPE + block quantization + record packing (one Triton
        # launch each; the model's decode step calls them instead of the composed chain)
        "window_kv_records": attention_fused.window_kv_records,
        "write_window_kv": attention_fused.write_window_kv,
        "compressed_kv_records": attention_fused.compressed_kv_records,
        "index_key_records": attention_fused.index_key_records,
        # cache records <-> rows (the prefill path; one Triton launch each on the GPU)
        "pack_window_kv": formats.pack_window_kv,
        "unpack_window_kv": formats.unpack_window_kv,
        "unpack_compressed_kv": formats.unpack_compressed_kv,
        "unpack_index_key": formats.unpack_index_key,
        "linear": linear.linear,
        "linear_quant_act": linear.linear_quant_act,
        "grouped_linear": linear.grouped_linear,
        "route_sqrtsoftplus": moe.route_sqrtsoftplus,
        "expert_ffn": moe.expert_ffn,
        "moe_routed_experts": moe.moe_routed_experts,
        "index_scores": indexer.index_scores,
        "select_candidate_blocks": indexer.select_candidate_blocks,
        "topk_positions": indexer.topk_positions,
        "compress_pool": compressor.compress_pool,
        "engram_inject": engram.engram_inject,
        "engram_hash_windows": engram.engram_hash_windows,
        "engram_rows": engram.engram_rows,
        "fake_quant_fp8_block32": quant.fake_quant_fp8_block32,
        "fake_quant_fp4_ue8m0_block32": quant.fake_quant_fp4_ue8m0_block32,
        "fake_quant_fp4_e4m3_block16": quant.fake_quant_fp4_e4m3_block16,
        "sample_tokens": sampling.sample_tokens,
        "greedy_tokens": sampling.greedy_tokens,
        "token_logprobs": sampling.token_logprobs,
    }
    for op, fn in table.items():
        registry.register(op, registry.REFERENCE, fn)
