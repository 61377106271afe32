#!/usr/bin/env bash
# Device round 64 (session 14): the Gluon FP8 projection `linear_wide` (WG warpgroups of 64
# weight rows share one TMA-fed token tile: x from L2 2 BT / BO bytes per weight byte against
# linear_decode's 8 at 256 rows; round 62a: L2 at 71 % of peak, 427 MB for wo_b's 42 MB).
# Carry the triton-cache parts.
#   PART=a (≈ 5 min): its GPU checks (the slice shapes at 65-256 rows against the fp64
#     reference and linear_decode; every launch class), then bench/gemm_decode.py at 64 / 128 /
#     256 rows: linear_decode (wm) against linear_wide launches (gl:WG:BT:STAGES:wN).
#   PART=b (≈ 3 min): decode 64 / 256 x 4K / 32K with --linear-wide-rows ${WIDE_ROWS:-65}
#     (mHC: the 256-row calls on the prefill launch, the session-14 default).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -s -x \
    tests/gpu/test_linear_wide_gpu.py >"$OUT/wide_tests.log" 2>&1
  echo "linear_wide GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" \
    "$OUT/wide_tests.log" | tail -6; grep -E "^\| linear_" "$OUT/wide_tests.log" | head -60
  V="wm,gl,gl:1:128:6:w2,gl:2:128:4:w2,gl:2:128:6:w3,gl:2:256:4:w1,gl:2:256:4:w2,\
gl:2:256:3:w3,gl:4:128:4:w2,gl:4:128:3:w3,gl:1:256:4:w2"
  timeout 240 python3 bench/gemm_decode.py --rows 128 256 --variants "$V" \
    >"$OUT/gemm_decode.log" 2>&1
  echo "gemm_decode rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode.log"
  grep -iE "failed|error" "$OUT/gemm_decode.log" | head -6
  timeout 100 python3 bench/gemm_decode.py --rows 64 --variants \
    "wm,gl:1:64:6:w2,gl:2:64:6:w2,gl:1:64:8:w3,gl:2:64:4:w3" >"$OUT/gemm_decode64.log" 2>&1
  echo "gemm_decode 64 rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode64.log"
  grep -iE "failed|error" "$OUT/gemm_decode64.log" | head -6 ;;
b)
  timeout 260 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    --linear-wide-rows "${WIDE_ROWS:-65}" >"$OUT/decode.log" 2>&1
  echo "decode (--linear-wide-rows ${WIDE_ROWS:-65}) rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_linear|_hc_|_w4a8|_splitk|target" | head -24 ;;
esac
rm -f "$OUT/install.log"
