#!/usr/bin/env bash
# Device round 123 (session 21): round 122a's chunk_diff copied each record to the host inside
# the forward (a host sync per hook) and found most rows differing from layer 0 on, where
# chunk_check's plain runs had 2 of 3 prompts bit-identical. Now the records are device copies
# (no sync inside the forward): the 8K prompt 4K against 8K chunks, and 4K chunks twice
# (run-to-run) (≈ 3 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 bench/chunk_diff.py --prompt-len 8192 --seed 52 --chunks 4096,8192 \
    >"$OUT/diff8k.log" 2>&1
  echo "diff 4K/8K rc=$?"; sed -n '/^## prefill chunks/,$p' "$OUT/diff8k.log" | grep -v "| 0 |  | 0 |"
  timeout 150 python3 bench/chunk_diff.py --prompt-len 8192 --seed 52 --chunks 4096,4096 \
    >"$OUT/diff4k4k.log" 2>&1
  echo "diff 4K/4K rc=$?"; sed -n '/^## prefill chunks/,$p' "$OUT/diff4k4k.log" | grep -v "| 0 |  | 0 |" ;;
esac
rm -f "$OUT/install.log"
