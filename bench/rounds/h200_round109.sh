#!/usr/bin/env bash
# Device round 109 (session 20): the W4A8 decode expert GEMM's TMA ring depth (4 / 6 / 8
# stages) on the shipped boxes and on step tiles of 64 rows — the down GEMM (K = 2,304: 18
# steps per program) reaches only ~0.68 of HBM against the gated one's ~0.82 (round 108a).
#   PART=a (≈ 3 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 400 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
    --w4a8-stages 4 6 8 --w4a8-variants default tiled64 >"$OUT/moe.log" 2>&1
  echo "moe rc=$?"; grep -E "w4a8 (gated|down)|ceiling|Error|error" "$OUT/moe.log" | head -40 ;;
esac
rm -f "$OUT/install.log"
