#!/usr/bin/env bash
# Device round 108 (session 20): the W4A8 decode expert GEMM on weights in step tiles
# (`mxfp4_w4a8_order.to_step_tiles`: each program's [64 rows, 64 bytes] box of a 128-K step is
# one contiguous 4 KB run, so a program streams its weights sequentially) beside the shipped
# row-major boxes (each box 64 strided 64-byte pieces) — the GEMMs alone at 64 / 256 tokens,
# errors against the reference (the same bytes: equal errors expected).
#   PART=a (≈ 3 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 300 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
    --w4a8-variants default tiled128 tiled64 default >"$OUT/moe.log" 2>&1
  echo "moe rc=$?"; grep -E "w4a8|ceiling|Error|error" "$OUT/moe.log" | head -30 ;;
esac
rm -f "$OUT/install.log"
