#!/usr/bin/env bash
# Device round 164 (prepared in session 31, not run; after rounds 162 / 163) (≈ 9 min):
#   * session 31's GPU checks, each timed against the path it replaces: the indexer's scores
#     with each query's visible count (tiles no query of a program sees written -inf
#     unscored), the Gluon prefill attention with row counts (the picks' -1 padding not run:
#     the same bits), the radix top-k skipping its passes on rows of at most k scores;
#   * a lone 4K prompt with the kernel table by family (attention, indexer and the rest
#     should drop; the experts by the A/B below);
#   * the prefill expert GEMM with session 31's EXTRACT (o and y as (v & sign) | ((v >> 4) &
#     e1e0m): 32 LOP3 fewer per 128-K step and thread in the REP 2 loops' sm_90 SASS, the same
#     bits) against session 30's (the tree in ab-base.tar: `git archive 98bc43c > ab-base.tar`,
#     ignored: name it in the run's carry), trees interleaved three times (≈ 4 min): the engine's
#     4K shape (ws, one warpgroup of two fragments, BM 128) and its 8K shape (base, two
#     warpgroups of one fragment). Round 146 found an EXTRACT that moved ALU work onto the FMA
#     pipe 4-6 % slower; this one only drops ALU instructions. Keep it if new <= base in every
#     pair; otherwise revert 470e15e.
# Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
MOE4=(--tokens 4096 --bm 128 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 1
      --w4a16-rep 2 --w4a16-kernel ws --w4a16-parts 4)
MOE8=(--tokens 8192 --bm 128 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2
      --w4a16-rep 1 --w4a16-kernel base --w4a16-parts 4)
ab_base_tree ab-base.tar || exit 1
timeout 100 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_moe_gluon_gpu.py \
  -k "w4a16_prefill" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -4
timeout 120 python3 -m pytest -p no:cacheprovider -q -m gpu -s tests/gpu/test_attention_side_gpu.py \
  -k "index_scores or row_counts or gl_other or topk or bf16_rows" >"$OUT/gpu_attn.log" 2>&1
echo "attention-side checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_attn.log" | tail -4
grep -E "^(index_scores|attention_prefill_gl row|topk_positions causal|sparse_attention_sink bf16)" \
  "$OUT/gpu_attn.log" | cut -c1-130
timeout 150 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager \
  --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_4k.log"
sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" | cut -c1-150 \
  | grep -E "GPU busy|family|^\| (routed|dense|attention|indexer|rest)|_index_scores|_radix|_attn_prefill" | head -14
for i in 1 2 3; do
  for tree in base new; do
    for shape in 4 8; do
      if [ $shape = 4 ]; then args=("${MOE4[@]}"); else args=("${MOE8[@]}"); fi
      log="$OUT/moe${shape}k_${tree}_$i.log"
      if [ $tree = base ]; then
        (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 100 python3 \
          bench/moe_gluon_prefill.py "${args[@]}" >"$log" 2>&1)
      else
        timeout 100 python3 bench/moe_gluon_prefill.py "${args[@]}" >"$log" 2>&1
      fi
      echo "$tree ${shape}K $i rc=$?"; grep -E "^\| [0-9]" "$log" | cut -d'|' -f2,3,7,8,11
    done
  done
done
rm -f "$OUT/install.log"
