#!/usr/bin/env bash
# Device round 166 (session 32; rounds 162-165 merged into two rounds that fit one session's
# device time, the checks first): every GPU check of sessions 29-31's changes in one pytest
# process (one compile of each kernel) —
#   * sessions 29-30: the experts on Q8_32 values rounded once, the slot-major SwiGLU, the align
#     kernels (one program and chunked, CUDA-graph replays), the prefill expert GEMM and its
#     pipeline, the shared expert, batch invariance, the tiny model on the fused mHC sites, the
#     site kernels alone (hc_expand_norm, the site probe, the promoted projections,
#     rms_norm_q8, the engram injection);
#   * session 31: the indexer's scores with each query's visible count, the Gluon prefill
#     attention with row counts, the radix top-k skipping its passes, the gated expert GEMM
#     with the SwiGLU in its epilogue (off; bits against the unfused pair);
# then a lone 4K prompt with the kernel table by family, its host phases (and again behind a
# 150 ms GPU spin: the host's own enqueue pace, nothing to wait for), the torch ops with
# the code that issued them and its host syncs by site, and chunk_check of an 8K prompt in
# 8,192 / 2,048 / 1,024 chunks (the chunked align path; tokens and logprobs bit-identical
# across chunkings). Pass the commit hash literally. The A/Bs: round 167.
source "$(dirname "$0")/../device_setup.sh"
timeout 250 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_gemm_side_gpu.py tests/gpu/test_moe_gluon_gpu.py \
  tests/gpu/test_batch_invariance_gpu.py tests/gpu/test_shared_expert_gpu.py \
  tests/gpu/test_model_gpu.py tests/gpu/test_mhc_norm_gpu.py tests/gpu/test_attention_side_gpu.py \
  -k "align or w4a16_prefill or swiglu or shared or invariant or model or expand_norm \
      or site_probe or promoted or norm_q8 or engram_and_norm or index_scores or row_counts \
      or gl_other or topk or bf16_rows" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -8
grep -E "^(index_scores|attention_prefill_gl row|topk_positions causal|sparse_attention_sink bf16|gated \+ SwiGLU)" \
  "$OUT/gpu.log" | cut -c1-130
grep -E "^\| (hc_expand_norm|expand|  \.\.\. \+ q8|linear promoted|linear x\.float|hc_site|rms_norm)" \
  "$OUT/gpu.log" | cut -c1-120
timeout 170 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --host-phases \
  --host-phases-held 150 --op-stacks --sync-sites --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_4k.log"
sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" | cut -c1-150 \
  | grep -E "GPU busy|family|^\| (routed|dense|attention|indexer|rest)|_index_scores|_radix|_attn_prefill" | head -14
sed -n '/^host phases (ms/,/generate done/p' "$OUT/prefill_4k.log"
sed -n '/^host phases with the GPU held/,/generate done/p' "$OUT/prefill_4k.log"
grep -A12 -E "^(torch ops of one prefill|host syncs in one)" "$OUT/prefill_4k.log" | cut -c1-200 | head -28
timeout 150 python3 bench/chunk_check.py --prompt-len 8192 --chunks 8192,2048,1024 \
  --prompts 1 --out /tmp/j >"$OUT/chunk8k.log" 2>&1
echo "chunk check rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk8k.log" | grep "^| [0-9]"
rm -f "$OUT/install.log"
