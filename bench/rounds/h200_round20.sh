#!/usr/bin/env bash
# Device round 20 (one call, ≈ 8 min; device time left this session: ~11 min): session 7's expert
# defaults (vouched one-multiply loop capped at 168 registers; the down projection at BN=128 x
# BK=128 from 768 pairs) and the single-launch align kernel — their GPU checks, then the full
# decode and prefill tables (the eager reference is unchanged since round 15: not re-timed).
source "$(dirname "$0")/../device_setup.sh"
timeout 100 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu/test_gemm_side_gpu.py \
  -k "moe" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -8
timeout ${DECODE_TIMEOUT:-260} python3 bench/decode.py --out "$OUT" --no-eager \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -40
timeout ${PREFILL_TIMEOUT:-150} python3 bench/prefill.py --out "$OUT" --no-eager \
  >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -30
rm -f "$OUT/install.log"
