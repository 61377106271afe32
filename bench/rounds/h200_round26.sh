#!/usr/bin/env bash
# Device round 26 (≈ 8 min): the decode table and prefill at session 8's defaults — word-order
# expert stacks, decode attention v2, radix top-k, the FP8 projections' decode tiles (round 25
# measured each alone). Run with SAVE_TRITON_CACHE=1 (the new kernels are not in the carried cache).
source "$(dirname "$0")/../device_setup.sh"
timeout ${DECODE_TIMEOUT:-300} python3 bench/decode.py --out "$OUT" --no-eager \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -40
timeout ${PREFILL_TIMEOUT:-170} python3 bench/prefill.py --out "$OUT" --no-eager \
  >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -30
rm -f "$OUT/install.log"
