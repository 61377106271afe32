#!/usr/bin/env bash
# Device round 103 (session 19): the end-of-session figures at the final defaults — decode at
# 64 / 256 x 4K / 32K (the decode path is unchanged: `linear_wide` takes two warpgroups only
# from 4 waves of them, none at decode sizes) and a second 4K / 16K prefill sample.
#   PART=a (≈ 5 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 bench/decode.py --batches 64,256 --contexts 4096,32768 --no-eager \
    --no-profile --out "$OUT" >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| (64|256) \|"
  timeout 200 python3 bench/prefill.py --prompt-lens 4096,16384 --no-eager --no-profile \
    --out "$OUT" >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| (4096|16384) \|" "$OUT/prefill.log" ;;
esac
rm -f "$OUT/install.log"
