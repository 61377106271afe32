#!/usr/bin/env bash
# Device round 102 (session 19): `linear_wide` with two warpgroups per 256-row token tile where
# the grid holds >= 4 waves of them (wide_config) — its GPU checks, the prefill attention's
# (helpers refactored, same chain) and the model's; the 4K (profiled) and 16K prefill.
#   PART=a (≈ 6 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_linear_wide_gpu.py tests/gpu/test_attention_side_gpu.py \
    -k "linear_wide or bf16_rows or gl_other" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -6
  timeout 200 python3 bench/prefill.py --prompt-lens 4096,16384 --no-eager --host-phases \
    --out "$OUT" >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| (4096|16384) \||_attn|_w4a16|_linear_wide" "$OUT/prefill.log"
  sed -n '/host phases/,+9p' "$OUT/prefill.log"
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_model_gpu.py \
    >"$OUT/model_tests.log" 2>&1
  echo "model GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/model_tests.log" | tail -4 ;;
esac
rm -f "$OUT/install.log"
