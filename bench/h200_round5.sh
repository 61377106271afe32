#!/usr/bin/env bash
# Device round 5 (issue 7, after the first measurement): the routed-expert kernel alone at the
# slice shapes (bench/moe_decode.py), one decode point with its kernel profile and the engine
# loop's idle gaps + CUDA API calls, one 4K prefill with its kernel profile. ≈ 3 min warm.
source "$(dirname "$0")/device_setup.sh"
timeout ${MOE_TIMEOUT:-90} python3 bench/moe_decode.py >"$OUT/moe_decode.log" 2>&1
echo "moe_decode rc=$?"; tail -30 "$OUT/moe_decode.log"
timeout ${DECODE_TIMEOUT:-150} python3 bench/decode.py --out "$OUT" --batches 64 --contexts 4096 \
  --no-eager --profile-points 64x4096 >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | tail -40
timeout ${PREFILL_TIMEOUT:-90} python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 \
  --no-eager --repeats 2 >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | tail -30
