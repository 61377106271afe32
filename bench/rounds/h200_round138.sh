#!/usr/bin/env bash
# Device round 138 (session 24): decode 64 / 256 x 4K with the engram hash in one launch inside
# the decode graphs (round 135: 12.359 / 20.952 ms) (≈ 3 min). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 \
  --no-eager --no-profile >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -9
rm -f "$OUT/install.log"
