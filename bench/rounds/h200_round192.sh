#!/usr/bin/env bash
# Device round 192 (session 39) (≈ 6 min): the keys-on-M indexer scores
# (kernels/triton/index_scores_keys_m.py) — GPU checks of both float-key kernels (ratio 2 and 1
# causal, 64 x 64K), the launch sweep at a 4K prompt's shapes (bench/index_prefill.py --causal),
# the MoE align GPU check at CHUNK 512; then the lone 4K prompt (kernel table, families) and
# session 39's three changes end to end against off (prefill_ab: the radix top-k and CHUNK 4096
# as before; the float-key kernel's choice is a string, so "off" keeps keys_m — its share is
# the kernel table's). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 -m pytest -q -p no:warnings tests/gpu/test_attention_side_gpu.py \
  tests/gpu/test_gemm_side_gpu.py -k "index_scores or moe_align" >"$OUT/gpu.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$OUT/gpu.log"
for args in "--keys 2048 --causal 2" "--keys 4096 --causal 1"; do
  timeout 100 python3 bench/index_prefill.py --queries 4096 $args >>"$OUT/index.log" 2>&1
  echo "index_prefill $args rc=$?"
done
grep -E "^\||ceiling" "$OUT/index.log" | grep -v "^|---" | cut -c1-120
timeout 200 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --out "$OUT" \
  >"$OUT/prefill_4k.log" 2>&1
echo "prefill 4K rc=$?"
grep -E "^prefill 4096|GPU busy|^\| 4096|^\| (routed|dense|attention|indexer|rest)|topk|_chunk_|_index_scores|_scores_keys" \
  "$OUT/prefill_4k.log" | cut -c1-150 | head -20
prefill_ab_4k 3 "off=--launch-constant topk_bisect.MIN_ROWS=1000000 --launch-constant moe_align.CHUNK=4096" \
  "on=--launch-constant topk_bisect.MIN_ROWS=512 --launch-constant moe_align.CHUNK=512"
rm -f "$OUT/install.log"
