#!/usr/bin/env bash
# Device round 121 (session 21): run-to-run against chunking differences of round 120a (8K
# prompts: one of three flipped its first token, margin 0.16, in one 8K chunk against two of
# 4K; 16K prompts: 8K chunks bit-identical to 4K ones, 16K chunks not). bench/chunk_check.py
# with each chunk size twice, each on an engine of its own (≈ 4 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 bench/chunk_check.py --prompt-len 8192 --chunks 4096,4096,8192,8192 \
    --prompts 3 --out "$OUT" >"$OUT/chunk8k.log" 2>&1
  echo "chunk check 8K rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk8k.log"
  mkdir -p /tmp/j
  timeout 200 python3 bench/chunk_check.py --prompt-len 16384 --chunks 8192,8192,16384,16384 \
    --out /tmp/j >"$OUT/chunk16k.log" 2>&1
  echo "chunk check 16K rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk16k.log" ;;
esac
rm -f "$OUT/install.log"
