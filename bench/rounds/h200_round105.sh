#!/usr/bin/env bash
# Device round 105 (session 19): a second decode sample at 64 / 256 x 32K on another start of
# the machine (round 103a read 256 x 32K at eta 0.595 with the decode path unchanged since
# session 18's 0.619: how much of that is the machine).
#   PART=a (≈ 2 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 bench/decode.py --batches 64,256 --contexts 4096,32768 --no-eager \
    --no-profile --out "$OUT" >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| (64|256) \|" ;;
esac
rm -f "$OUT/install.log"
