#!/usr/bin/env bash
# Device round 118 (session 21): eager steps in flight across schedules (Engine.eager_in_flight:
# a prefill chunk launched behind the one still running when its tokens are the prompt's). The
# model's GPU checks through the engine, then 4 prompts of 4K and of 16K in one generate with
# eager steps in flight / collected in their own step (A/B interleaved, the same first tokens),
# then decode 64 x 32K and the engine loop's idle gap (the decode path after a prefill) (≈ 6 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_model_gpu.py >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
  timeout 240 python3 bench/prefill.py --prompt-lens 4096,16384 --no-eager --no-profile \
    --batch-prompts 4 --out "$OUT" >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| (4096|16384) \||^\| 4 x|same first" "$OUT/prefill.log"
  timeout 150 python3 bench/decode.py --batches 64 --contexts 32768 --no-eager \
    --profile-points 64x32768 --out "$OUT" >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| 64 \|"
  grep -E "engine loop" "$OUT/decode.log" ;;
esac
rm -f "$OUT/install.log"
