#!/usr/bin/env bash
# Device round 193 (session 39) (≈ 5 min): the MoE align's scatter reading its chunk counts 8
# chunks a load (GPU check, chunk sizes at 2K-8K tokens), the keys-on-M index scores at
# KEY_TILES 16 (GPU checks), then the lone 4K prompt (kernel table, families) and session 39's
# three changes end to end against all off (prefill_ab: the radix top-k, CHUNK 4096, the rows
# float-key kernel). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -q -p no:warnings tests/gpu/test_attention_side_gpu.py \
  tests/gpu/test_gemm_side_gpu.py -k "index_scores or moe_align" >"$OUT/gpu.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$OUT/gpu.log"
timeout 60 python3 bench/moe_align.py --tokens 2048 4096 8192 --block-m 128 \
  --variants 8192:512 8192:1024 8192:2048 >"$OUT/align.log" 2>&1
echo "moe_align rc=$?"; grep -E "^\| [0-9]" "$OUT/align.log" | cut -d'|' -f2-7
timeout 200 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --out "$OUT" \
  >"$OUT/prefill_4k.log" 2>&1
echo "prefill 4K rc=$?"
grep -E "^prefill 4096|GPU busy|^\| 4096|^\| (routed|dense|attention|indexer|rest)|topk|_chunk_|_index_scores|_scores_keys" \
  "$OUT/prefill_4k.log" | cut -c1-150 | head -20
prefill_ab_4k 3 "off=--launch-constant topk_bisect.MIN_ROWS=1000000 --launch-constant moe_align.CHUNK=4096 --launch-choice indexer.FLOAT_KERNEL=rows" \
  "on=--launch-constant topk_bisect.MIN_ROWS=512 --launch-constant moe_align.CHUNK=512 --launch-choice indexer.FLOAT_KERNEL=keys_m"
rm -f "$OUT/install.log"
