#!/usr/bin/env bash
# Device round 57 (session 13). Round 56b's 256 x 32K step: the routed experts run at ~0.84 of
# their bytes (15.8 ms); the rest (10.5 ms) is at ~0.13 of its roofline, and its largest part
# is `_linear_decode_kernel` (3.0 ms, the FP8 projections at 256 rows on bf16 tensor cores at
# ~230 TFLOP/s: BT 256 = 190 registers, 2 programs of 4 warps per SM) plus split-K sums
# (0.27 ms). Carry the triton-cache parts.
#   PART=a (≈ 2 min): bench/gemm_decode.py at 128 / 256 rows — token tiles of 128 (4 programs
#     per SM at 116 registers), 8 warps on BT 256 (118), BO 128, one wave (no split-K sums).
#   PART=b (≈ 4 min): the linear_decode GPU checks, then decode 64 / 256 x 4K / 32K with
#     profiles (token tiles of 128 above 128 rows: decode_config after round 57a).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 300 python3 bench/gemm_decode.py --rows 128 256 --variants \
    wm,wm:64x32x128:4:4:w2,wm:64x32x128:4:4:w1,wm:64x32x128:6:4:w2,wm:64x32x128:6:4:w1,wm:128x32x128:4:8:w2,wm:128x32x128:4:8:w1,wm:64x32x256:4:8:w2,wm:64x32x256:4:8:w1,wm:128x32x256:3:8:w1,wm:64x64x128:3:4:w2,wm:64x32:4:4:w1 \
    >"$OUT/gemm_decode.log" 2>&1
  echo "gemm_decode rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode.log" ;;
b)
  timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_gemm_side_gpu.py \
    -k "linear_decode" >"$OUT/linear_tests.log" 2>&1
  echo "linear_decode GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" \
    "$OUT/linear_tests.log" | tail -6
  timeout 230 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_w4a8|_linear|_splitk|start-up|idle|target" | head -20 ;;
esac
rm -f "$OUT/install.log"
