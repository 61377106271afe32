#!/usr/bin/env bash
# Device round 124 (prepared in session 21, not run: no device time left): rounds 122a-123a
# found per-row differences between 4K and 8K prefill chunks from layer 0 on. Now with the
# attention op's q and kv rows recorded, and once more with the mHC coefficients' K split fixed
# (--coeffs-split 8: by default it follows the step's size, mhc.coeffs_split) (≈ 3 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 bench/chunk_diff.py --prompt-len 8192 --seed 52 --chunks 4096,8192 \
    >"$OUT/diff8k.log" 2>&1
  echo "diff rc=$?"; sed -n '/^## prefill chunks/,$p' "$OUT/diff8k.log" | grep -v "| 0 |  | 0 |"
  timeout 150 python3 bench/chunk_diff.py --prompt-len 8192 --seed 52 --chunks 4096,8192 \
    --coeffs-split 8 >"$OUT/diff8k_split8.log" 2>&1
  echo "diff, split 8 rc=$?"
  sed -n '/^## prefill chunks/,$p' "$OUT/diff8k_split8.log" | grep -v "| 0 |  | 0 |" ;;
esac
rm -f "$OUT/install.log"
