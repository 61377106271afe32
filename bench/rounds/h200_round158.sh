#!/usr/bin/env bash
# Device round 158 (session 28): KERNEL "auto" (the producer-warp kernel for the one-warpgroup
# REP 2 programs, up to 64 pairs per expert; the base kernel above) as the default — GPU checks
# (the pipeline on base / ws / auto: the same bits; the batch-invariance checks), chunk_check
# of an 8K prompt in 8,192 / 4,096 / 2,048 / 1,024 chunks (ws steps against base steps: tokens
# and logprobs bit-identical), then a lone 4K prompt, base and auto interleaved (≈ 6 min).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 240 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_moe_gluon_gpu.py \
  tests/gpu/test_batch_invariance_gpu.py -k "w4a16_prefill or invariant" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -6
mkdir -p /tmp/j
timeout 150 python3 bench/chunk_check.py --prompt-len 8192 --chunks 8192,4096,2048,1024 \
  --prompts 1 --out /tmp/j >"$OUT/chunk8k.log" 2>&1
echo "chunk check rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk8k.log" | grep "^| [0-9]"
for i in 1 2; do
  for k in base auto; do
    timeout 100 python3 bench/prefill.py --prompt-lens 4096 --repeats 5 --no-eager \
      --no-profile --w4a16-kernel $k --out "$OUT/$k$i" >"$OUT/prefill_${k}_$i.log" 2>&1
    echo "$k $i rc=$?"; grep -E "^prefill [0-9]|^\| 4096" "$OUT/prefill_${k}_$i.log"
  done
done
rm -f "$OUT/install.log"
