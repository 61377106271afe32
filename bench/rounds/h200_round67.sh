#!/usr/bin/env bash
# Device round 67 (session 14): linear_wide at prefill sizes. At 256 rows it runs wo_b at ~420
# TFLOP/s (round 65a); the prefill's FP8 projections run `_linear_kernel` (128x128 tiles, the
# decoded weight through shared memory) at ~270: 35.0 ms of the 4K prefill's 150.8 (session 12
# round 50).
# Carry the triton-cache parts (4 since round 66).
#   PART=a (≈ 5 min): bench/gemm_decode.py at 4,096 rows (bf16 = the prefill path, gl = linear_
#     wide: token tiles of 256 / 128), then the 4K / 16K prefill with every FP8 projection on
#     linear_wide (--linear-wide-max-rows 1000000); compare round 50's profile.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 120 python3 bench/gemm_decode.py --rows 4096 --reps 5 \
    --variants "bf16,gl,gl:1:128:64:4:w1,gl:1:256:64:4:w1,gl:1:256:32:4:w1" \
    >"$OUT/gemm_4096.log" 2>&1
  echo "gemm_decode 4096 rc=$?"; grep -E "^\| (wq_b|wo_b) " "$OUT/gemm_4096.log"
  sed -n '/^All shapes/,$p' "$OUT/gemm_4096.log" | grep -E "^\| [0-9]"
  timeout 240 python3 bench/prefill.py --out "$OUT" --no-eager --linear-wide-max-rows 1000000 \
    >"$OUT/prefill.log" 2>&1
  echo "prefill (--linear-wide-max-rows 1000000) rc=$?"
  sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -16 ;;
esac
rm -f "$OUT/install.log"
