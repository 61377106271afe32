#!/usr/bin/env bash
# Device round 51 (session 12): decode 64 / 256 x 4K / 32K at the session's final defaults
# (profiles at 64 x 4K and 256 x 32K), saving the Triton cache with the decode graph's
# linear_decode kernels in it. Carry round 50's triton-cache parts. One call (≈ 3 min).
export SAVE_TRITON_CACHE=1
source "$(dirname "$0")/../device_setup.sh"
timeout 220 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
  --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
  | grep -E "^\| (64|256) \||busy|start-up|idle|target" | head -16
rm -f "$OUT/install.log"
