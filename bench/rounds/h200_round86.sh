#!/usr/bin/env bash
# Device round 86 (session 17): the mHC coefficients in one fused fn tile (comb, pre, post,
# padding: one dot of N 32 per K step, FN_PARTS under bf16x3; was three dots of N 16, nine
# waited wgmmas per step at prefill). Round 85: 3,221 µs per 4K prefill (16 calls); decode
# 256 x 32K 23.98 ms (η 0.605).
#   PART=a (≈ 6 min): GPU checks (mHC, model), the 4K prefill with its profile (where the
#     largest host gap sits), decode 256 x 32K and 64 x 4K.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_gemm_side_gpu.py \
    tests/gpu/test_model_gpu.py -k "hc or mhc or model" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "$OUT/tests.log" | tail -4
  timeout 170 python3 bench/prefill.py --prompt-lens 4096 --no-eager --out "$OUT" \
    >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096|_hc_coeffs|_w4a16" "$OUT/prefill.log"
  sed -n '/GPU idle/,/^$/p' "$OUT/prefill.log" | head -7
  timeout 150 python3 bench/decode.py --batches 64,256 --contexts 4096,32768 --no-eager \
    --no-profile >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| (64|256) \|" ;;
esac
rm -f "$OUT/install.log"
