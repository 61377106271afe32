#!/usr/bin/env bash
# Device round 194 (session 39) (≈ 3 min): the MoE align's sentinel rows written by the sort
# launch's programs (contiguous) instead of the scatter's one fill program (512 x 128
# scattered stores) — the GPU check against the torch version, the align alone at 2K-8K
# tokens, and the lone 4K prompt (kernel table, families). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 100 python3 -m pytest -q -p no:warnings tests/gpu/test_gemm_side_gpu.py -k "moe_align" \
  >"$OUT/gpu.log" 2>&1
echo "gpu align test rc=$?"; tail -2 "$OUT/gpu.log"
timeout 60 python3 bench/moe_align.py --tokens 2048 4096 8192 --block-m 128 \
  --variants 8192:512 >"$OUT/align.log" 2>&1
echo "moe_align rc=$?"; grep -E "^\| [0-9]" "$OUT/align.log" | cut -d'|' -f2-7,11
timeout 200 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --out "$OUT" \
  >"$OUT/prefill_4k.log" 2>&1
echo "prefill 4K rc=$?"
grep -E "^prefill 4096|GPU busy|^\| 4096|^\| (routed|dense|attention|indexer|rest)|topk|_chunk_|_scores_keys" \
  "$OUT/prefill_4k.log" | cut -c1-150 | head -16
rm -f "$OUT/install.log"
