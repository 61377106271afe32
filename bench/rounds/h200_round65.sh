#!/usr/bin/env bash
# Device round 65 (session 14): linear_wide with two scale columns per ring stage (BK 64: half
# the barriers and waits per K) against BK 32 (round 64a's best: one warpgroup, one token tile
# of all rows: 194.0 µs for the seven slice shapes at 256 rows, linear_decode 230.8).
# Carry the triton-cache parts.
#   PART=a (≈ 5 min): the GPU checks (every launch class incl. BK 64), then bench/gemm_decode.py
#     at 256 / 128 / 64 rows over BK, stages and waves, linear_decode (wm) in the same run.
#   PART=b (≈ 3 min): decode 64 / 256 x 4K / 32K with --linear-wide-rows ${WIDE_ROWS:-1}.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -s -x \
    tests/gpu/test_linear_wide_gpu.py >"$OUT/wide_tests.log" 2>&1
  echo "linear_wide GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" \
    "$OUT/wide_tests.log" | tail -6; grep -E "^\| linear_wide (wo_b|WG)" "$OUT/wide_tests.log" | head -30
  for R in 256 128 64; do
    case $R in
      256) V="wm,gl,gl:1:256:64:3:w2,gl:1:256:64:2:w2,gl:1:256:64:3:w3,gl:1:256:64:3:w1,gl:1:256:32:5:w2,gl:1:256:32:4:w3,gl:1:128:64:4:w2" ;;
      128) V="wm,gl,gl:1:128:64:4:w2,gl:1:128:64:5:w2,gl:1:128:64:4:w3,gl:1:128:32:8:w2" ;;
      64) V="wm,gl,gl:1:64:64:4:w2,gl:1:64:64:6:w2,gl:1:64:64:6:w3,gl:1:64:32:8:w3" ;;
    esac
    timeout 150 python3 bench/gemm_decode.py --rows $R --variants "$V" \
      >"$OUT/gemm_decode$R.log" 2>&1
    echo "gemm_decode $R rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode$R.log" | grep -E "^\| [0-9]"
    grep -iE "failed|error" "$OUT/gemm_decode$R.log" | head -4
  done ;;
b)
  timeout 260 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    --linear-wide-rows "${WIDE_ROWS:-1}" >"$OUT/decode.log" 2>&1
  echo "decode (--linear-wide-rows ${WIDE_ROWS:-1}) rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_linear|_hc_|_w4a8|_splitk|target" | head -24 ;;
esac
rm -f "$OUT/install.log"
