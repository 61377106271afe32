#!/usr/bin/env bash
# Device round 8 (one call, ≤ 9 min): every GPU kernel and engine check (tests/gpu) to the end,
# then the routed-expert kernel alone at decode and prefill sizes (bench/moe_decode.py: MXFP4
# W4A16 vs FP8 re-encoded, 1..4096 tokens) and one 4K prefill with its kernel profile.
source "$(dirname "$0")/../device_setup.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout ${GPU_TESTS_TIMEOUT:-330} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu \
  -rf --durations=8 >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|s call" "$OUT/gpu_tests.log" | tail -14
timeout ${MOE_TIMEOUT:-110} python3 bench/moe_decode.py >"$OUT/moe_decode.log" 2>&1
echo "moe_decode rc=$?"; tail -20 "$OUT/moe_decode.log"
timeout ${PREFILL_TIMEOUT:-70} python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 \
  --no-eager --repeats 2 >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -16
rm -f "$OUT/install.log"
