#!/usr/bin/env bash
# Device round 134 (session 23): the W4A8 experts on the bf16 prefill pipeline from 11 pairs
# per expert (moe_experts.DECODE_MAX_PAIRS_PER_EXPERT 10, was 16), 64 pairs per block up to 32
# pairs per expert. The batch-invariance checks (now with the routed experts) and the tiny
# model's; chunk_check of one 8K prompt at chunks 8,192 / 2,048 / 1,024 (bits: BM 128 vs 64);
# a lone 1K prompt with the new rule and the old (--moe-decode-max-pairs 16) (≈ 5 min).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a) timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
     tests/gpu/test_batch_invariance_gpu.py tests/gpu/test_model_gpu.py >"$OUT/tests.log" 2>&1
   echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
   timeout 120 python3 bench/chunk_check.py --prompt-len 8192 --prompts 1 \
     --chunks 8192,2048,1024 --tokens 4 --repeats 1 --out "$OUT" >"$OUT/chunk.log" 2>&1
   echo "chunk check rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk.log" | grep "^| [0-9]"
   for rule in new 16; do
     extra=(); [ $rule = 16 ] && extra=(--moe-decode-max-pairs 16)
     timeout 70 python3 bench/prefill.py --prompt-lens 1024 --repeats 5 --no-eager \
       --no-profile "${extra[@]}" --out /tmp/j >"$OUT/prefill_$rule.log" 2>&1
     echo "prefill rule $rule rc=$?"; grep -E "^prefill 1024" "$OUT/prefill_$rule.log"
   done ;;
esac
rm -f "$OUT/install.log"
