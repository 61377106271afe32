#!/usr/bin/env bash
# Device round 113 (session 20): the W4A8 decode GEMM's activation codes by cp.async a step
# ahead (moe_gluon_w4a8.DECODE_XCP: no loop-carried uint8 registers — ~22 byte moves a step
# in the sm_90 SASS, 228 -> 216 instructions a step in the down loop, 359 -> 349 gated; the
# down GEMM is issue-bound, round 110a) against the register path. PART=a: its GPU checks and
# the GEMMs alone, interleaved (≈ 3 min); PART=b: decode 64 / 256 x 32K, interleaved
# 1 / 0 / 1 (≈ 4 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  w4a8_decode_checks_and_gemms 150 xcp=0 xcp=1 xcp=0 xcp=1 ;;
b)
  for v in 1 0 1; do
    timeout 150 python3 bench/decode.py --batches 64,256 --contexts 32768 --no-eager \
      --no-profile --w4a8-decode-variant "1:128:80:$v" --out /tmp/xcp$v \
      >"$OUT/decode_xcp$v.log" 2>&1
    echo "decode xcp=$v rc=$?"
    sed -n '/^## decode/,$p' "$OUT/decode_xcp$v.log" | grep -E "^\| (64|256) \|"
  done ;;
esac
rm -f "$OUT/install.log"
