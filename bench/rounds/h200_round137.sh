#!/usr/bin/env bash
# Device round 137 (session 24): the engram hash ids in one launch (engram_hash_windows) on top
# of round 136's record kernels. Base: 6103ddc (carry ab-base.tar = `git archive 6103ddc`).
# a: the engram hash and records GPU checks, the tiny model's GPU checks, chunk_check 8 x 1,024
#    in both trees with bits compared, 64 x 128-token prompts in both trees (≈ 6 min).
# b: a lone 4K prompt with its kernel table and 8 x 4K in one generate with the batch's kernel
#    table; the host phases of a lone 1K prompt (≈ 6 min).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a) timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
     tests/gpu/test_gemm_side_gpu.py tests/gpu/test_attention_side_gpu.py \
     -k "engram_hash or record" >"$OUT/tests_kernels.log" 2>&1
   echo "kernel checks rc=$?"; tail -1 "$OUT/tests_kernels.log"
   prefill_short_prompts_ab 2 ;;
b) timeout 330 python3 bench/prefill.py --prompt-lens 4096 --batch-prompts 8 --repeats 3 \
     --no-eager --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
   echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" \
     | cut -c1-150 | head -90
   lone_1k_host_phases ;;
esac
rm -f "$OUT/install.log"
