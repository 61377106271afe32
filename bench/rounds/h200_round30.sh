#!/usr/bin/env bash
# Device round 30: session 9's defaults (paged index scores v2, FP8 projections above 64 rows on
# the bf16 path with split-K, no masking pass over the score rows, the launcher change) —
# PART=a: every GPU check, then the prefill table (run with SAVE_TRITON_CACHE=1: the new kernels
# are not in the carried cache); PART=b: the full decode table (carry part a's cache).
source "$(dirname "$0")/../device_setup.sh"
if [ "${PART:-a}" = a ]; then
  timeout 260 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -8
  timeout ${PREFILL_TIMEOUT:-200} python3 bench/prefill.py --out "$OUT" --no-eager \
    >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -30
fi
if [ "${PART:-a}" = b ]; then
  timeout ${DECODE_TIMEOUT:-420} python3 bench/decode.py --out "$OUT" --no-eager \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -60
fi
rm -f "$OUT/install.log"
