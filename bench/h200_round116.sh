#!/usr/bin/env bash
# Device round 116 (session 21+): the down expert GEMM on the gated loop (DECODE_PAIRED: a
# program's 128 rows of a step tile as the loop's two operands — one activation tile, one
# barrier / TMA / scale-load round and one token-scale extraction per 8 KB instead of per 4 KB;
# 349 instructions per 8 KB in the sm_90 SASS against 2 x 216) against the 64-row launch: its
# GPU checks, the GEMMs alone interleaved, decode 64 / 256 x 32K paired / not (≈ 5 min).
# Round 115a ran this at commit dc515e7, whose steady-state TMA read w1's rows for the second
# operand (wrong outputs; fixed since). If the checks pass and paired is faster, make
# moe_gluon_w4a8.DECODE_PAIRED the default.
source "$(dirname "$0")/device_setup.sh"
case "${PART:-a}" in
a)
  timeout 100 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_moe_gluon_gpu.py -k "w4a8 and not prefill or pipeline" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
  timeout 120 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
    --w4a8-variants paired=0 paired=1 paired=0 paired=1 >"$OUT/moe.log" 2>&1
  echo "moe rc=$?"; grep -E "w4a8 down|ceiling" "$OUT/moe.log" | head -10
  for v in 0 1; do  # the JSON left in $OUT: the paired (default) run
    timeout 110 python3 bench/decode.py --batches 64,256 --contexts 32768 --no-eager \
      --no-profile --w4a8-decode-variant "1:128:80:1:$v" --out "$OUT" \
      >"$OUT/decode_paired$v.log" 2>&1
    echo "decode paired=$v rc=$?"
    sed -n '/^## decode/,$p' "$OUT/decode_paired$v.log" | grep -E "^\| (64|256) \|"
  done ;;
esac
rm -f "$OUT/install.log"
