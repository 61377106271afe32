#!/usr/bin/env bash
# Device round 15 (one call, ≈ 7 min): session 6's defaults (A_BF16 expert tiles, prefill-sized
# FP8 projections on the bf16-decode kernel, index-score and mHC launches) — the whole GPU suite
# (tests/gpu: every kernel against its reference, the engine on the tiny model against the
# all-reference plan), then the full tables (bench/rounds/h200_round4.sh's decode 1-256 x 4K/32K and
# prefill 4K/16K, eager reference at decode 1 and 64, and at the 4K prefill).
source "$(dirname "$0")/../device_setup.sh"
timeout ${GPU_TESTS_TIMEOUT:-200} python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu \
  >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -8
timeout ${DECODE_TIMEOUT:-250} python3 bench/decode.py --out "$OUT" >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -40
timeout ${PREFILL_TIMEOUT:-130} python3 bench/prefill.py --out "$OUT" --eager-budget-s 40 \
  >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -30
rm -f "$OUT/install.log"
