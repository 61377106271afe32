#!/usr/bin/env bash
# Device round 22 (one call, ≈ 2.5 min; the last device time of session 7): the decode table at
# the final defaults (the down projection at BN=128 x BK=128 at every decode size since round
# 21), with the per-kernel profile at 64 x 4K and 256 x 32K; no eager reference (unchanged).
source "$(dirname "$0")/../device_setup.sh"
timeout 165 python3 bench/decode.py --out "$OUT" --no-eager >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -30
rm -f "$OUT/install.log"
