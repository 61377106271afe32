#!/usr/bin/env bash
# Device round 20 (one call, ≈ 8 min): session 7's expert defaults (vouched one-multiply loop
# capped at 168 registers; the down projection at BN=128 x BK=128 from 768 pairs) and the
# single-launch align kernel — their GPU checks and the engine on the tiny model against the
# reference, the down-tiling threshold at 128 tokens, then the full decode and prefill tables.
source "$(dirname "$0")/device_setup.sh"
timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu/test_gemm_side_gpu.py \
  tests/gpu/test_model_gpu.py -k "moe or align or model or engine" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -8
timeout 60 python3 bench/moe_decode.py --tokens --config-tokens 128 --configs \
  16x64x256:1:4:4:0:1:2@168,16x64x256:1:4:4:0:1:2@168/128x128:4:4 >"$OUT/moe_128.log" 2>&1
echo "moe 128 rc=$?"; grep -A4 "W4A16 tilings" "$OUT/moe_128.log"
timeout ${DECODE_TIMEOUT:-250} python3 bench/decode.py --out "$OUT" >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -40
timeout ${PREFILL_TIMEOUT:-130} python3 bench/prefill.py --out "$OUT" --eager-budget-s 40 \
  >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -30
rm -f "$OUT/install.log"
