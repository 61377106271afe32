#!/usr/bin/env bash
# Device round 125 (session 22): batch-invariant prefill steps. Round 124a traced the 4K-vs-8K
# chunk differences to two launch choices that follow the step's row count: wkv's split-K in
# linear_wide (2 at 4,096 rows, 1 at 8,192) and the mHC coefficients' split (8 / 4). Now from
# gemm_fp8.INVARIANT_MIN_ROWS (1,024) rows neither does. The cost (the seven slice projections
# and the mHC coefficients, the new rule against the old one in one run), then chunk_diff /
# chunk_check for bit-identical chunkings, then the 4K prefill (≈ 7 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 120 python3 bench/gemm_decode.py --rows 1024 2048 4096 8192 --variants gl,gl:w1 \
    >"$OUT/gemm.log" 2>&1
  echo "gemm rc=$?"; grep "^|" "$OUT/gemm.log" | grep -v "^|---"
  timeout 90 python3 bench/mhc_prefill.py --tokens 256 1024 4096 8192 16384 \
    --variants default,64:64:4:4:528:bf16x3:3:0 >"$OUT/mhc.log" 2>&1
  echo "mhc rc=$?"; grep "^|" "$OUT/mhc.log" | grep -v "^|---"
  timeout 120 python3 bench/chunk_diff.py --prompt-len 8192 --seed 52 --chunks 4096,8192 \
    >"$OUT/diff8k.log" 2>&1
  echo "diff rc=$?"; sed -n '/^## prefill chunks/,$p' "$OUT/diff8k.log" | grep -v "| 0 |  | 0 |"
  mkdir -p /tmp/j
  timeout 170 python3 bench/chunk_check.py --prompt-len 8192 --chunks 8192,4096,2048,1024 \
    --prompts 3 --out /tmp/j >"$OUT/chunk8k.log" 2>&1
  echo "chunk check rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk8k.log"
  timeout 100 python3 bench/prefill.py --prompt-lens 4096 --no-eager --no-profile \
    --out /tmp/j >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\|" "$OUT/prefill.log" | tail -4 ;;
esac
rm -f "$OUT/install.log"
