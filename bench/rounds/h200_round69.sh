#!/usr/bin/env bash
# Device round 69 (prepared in session 14, not run: device time spent). linear_wide's
# warp-specialized variant (`linear_wide_ws.py`: a loader warp feeds the ring, the consumer
# warpgroup only waits, decodes and multiplies; linear_wide's loop has 4 CTA barriers per 64-K
# step), compiled for sm_90 on the CPU only; and the decode with a Triton cache that holds the
# final kernels (round 66a's saved cache predates them: round 65b compiled linear_wide during
# the graph capture, start-up 30.8 s, all-bucket estimate 141 s).
# Carry the triton-cache parts (4).
#   PART=a (≈ 4 min): the GPU checks (the WS variant bit-identical to linear_wide), then
#     bench/gemm_decode.py at 256 / 128 / 64 rows: gl (default) vs glws at the same launch and
#     its stage counts; linear_wide at 1 / 16 / 32 rows against linear_decode.
#   PART=b (≈ 4 min): decode 64 / 256 x 4K / 32K at the defaults, SAVE_TRITON_CACHE=1 (then
#     copy the parts to the repo root), and the start-up with all plan buckets
#     (the report's all-bucket estimate, now from warm compiles).
[ "${PART:-a}" = b ] && export SAVE_TRITON_CACHE=1  # read when device_setup.sh is sourced
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -s -x \
    tests/gpu/test_linear_wide_gpu.py >"$OUT/wide_tests.log" 2>&1
  echo "linear_wide GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" \
    "$OUT/wide_tests.log" | tail -6; grep -E "^\| linear_wide_ws" "$OUT/wide_tests.log" | head -12
  for R in 256 128 64; do
    case $R in
      256) V="gl,glws:256:64:3:w1,glws:256:64:2:w1,glws:256:64:3:w2,glws:256:32:4:w1" ;;
      128) V="gl,glws:128:64:4:w2,glws:128:64:6:w2,glws:128:64:4:w3" ;;
      64) V="gl,glws:64:64:4:w2,glws:64:64:6:w2,glws:64:64:8:w3" ;;
    esac
    timeout 100 python3 bench/gemm_decode.py --rows $R --variants "$V" \
      >"$OUT/gemm_decode$R.log" 2>&1
    echo "gemm_decode $R rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode$R.log" | grep -E "^\| [0-9]"
    grep -iE "failed|error" "$OUT/gemm_decode$R.log" | head -4
  done
  # linear_wide below 64 rows (the engine keeps linear_decode there: untimed)
  timeout 100 python3 bench/gemm_decode.py --rows 1 16 32 --variants \
    "wm,gl,gl:1:64:64:6:w3,gl:1:64:64:8:w4" >"$OUT/gemm_decode_small.log" 2>&1
  echo "gemm_decode 1/16/32 rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode_small.log" \
    | grep -E "^\| [0-9]" ;;
b)
  timeout 300 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_linear|start-up|buckets|idle|target" | head -24 ;;
esac
rm -f "$OUT/install.log"
