#!/usr/bin/env bash
# Device round 115 (session 20): the down expert GEMM on the gated loop (DECODE_PAIRED: a
# program's 128 rows of a step tile as the loop's two operands — one activation tile, one
# barrier / TMA / scale-load round and one token-scale extraction per 8 KB instead of per 4 KB;
# 349 instructions per 8 KB in the sm_90 SASS against 2 x 216) against the 64-row launch: its
# GPU checks, the GEMMs alone interleaved, decode 64 / 256 x 32K paired / not (≈ 5 min).
# Ran at commit dc515e7: the paired launch's steady-state TMA read w1's rows for the second
# operand (ROW3 not passed in the loop): wrong outputs (rel. error 0.91) and an optimistic
# timing (the second box an L2 hit). Fixed after; bench/rounds/h200_round116.sh repeats it.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  w4a8_decode_checks_and_gemms 100 paired=0 paired=1 paired=0 paired=1
  for v in 0 1; do  # the JSON left in $OUT: the paired run
    timeout 110 python3 bench/decode.py --batches 64,256 --contexts 32768 --no-eager \
      --no-profile --w4a8-decode-variant "1:128:80:1:$v" --out "$OUT" \
      >"$OUT/decode_paired$v.log" 2>&1
    echo "decode paired=$v rc=$?"
    sed -n '/^## decode/,$p' "$OUT/decode_paired$v.log" | grep -E "^\| (64|256) \|"
  done ;;
esac
rm -f "$OUT/install.log"
