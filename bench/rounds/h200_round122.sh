#!/usr/bin/env bash
# Device round 122 (session 21): where round 121a's chunkings first differ — bench/chunk_diff.py
# on the 8K prompt that flipped (seed 52: one 8K chunk against two 4K ones) and on the 16K one
# (seed 50: one 16K chunk against two 8K ones): per layer the attention input, top-k selection,
# attention and FFN outputs, row by row (≈ 3 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 bench/chunk_diff.py --prompt-len 8192 --seed 52 --chunks 4096,8192 \
    >"$OUT/diff8k.log" 2>&1
  echo "diff 8K rc=$?"; sed -n '/^## prefill chunks/,$p' "$OUT/diff8k.log" | grep -v "| 0 |  | 0 |"
  timeout 200 python3 bench/chunk_diff.py --prompt-len 16384 --seed 50 --chunks 8192,16384 \
    >"$OUT/diff16k.log" 2>&1
  echo "diff 16K rc=$?"; sed -n '/^## prefill chunks/,$p' "$OUT/diff16k.log" | grep -v "| 0 |  | 0 |" ;;
esac
rm -f "$OUT/install.log"
