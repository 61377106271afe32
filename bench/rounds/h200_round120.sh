#!/usr/bin/env bash
# Device round 120 (session 21): prefill chunks of 4,096 / 8,192 / 16,384 tokens on the slice
# plan (round 119a: the 16K prompt 388.6 -> 334.5 ms with 8K chunks). bench/chunk_check.py:
# two 16K prompts greedy for 4 tokens per chunk size over one loaded model (chunked prefill
# against one-shot on the real kernels: tokens and logprobs against the 4K-chunk baseline) and
# the lone 16K prompt's prefill time; then the same at 8K prompts (chunks 4,096 / 8,192)
# (≈ 4 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 bench/chunk_check.py --prompt-len 16384 --chunks 4096,8192,16384 \
    --out "$OUT" >"$OUT/chunk16k.log" 2>&1
  echo "chunk check 16K rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk16k.log"
  mkdir -p /tmp/j
  timeout 150 python3 bench/chunk_check.py --prompt-len 8192 --chunks 4096,8192 --prompts 3 \
    --out /tmp/j >"$OUT/chunk8k.log" 2>&1
  echo "chunk check 8K rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk8k.log" ;;
esac
rm -f "$OUT/install.log"
