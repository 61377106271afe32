#!/usr/bin/env bash
# Device round 48 (session 12): the shared expert at prefill sizes on the dense projection
# kernels (shared_expert.py, MAX_ROWS raised by --shared-expert-max-rows) instead of the grouped
# 1-expert FP8 tiles (10.1 ms of the 4K prefill in session 11's profile, ~115 TFLOP/s; the
# dense bf16 path runs the attention projections at ~290). Carry the triton-cache parts.
#   PART=a (≈ 4 min): tests/gpu/test_shared_expert_gpu.py (64 / 256 / 4096 rows: dense and
#     grouped against the reference, both timed), then bench/prefill.py twice: the default
#     (control) and --shared-expert-max-rows 16384.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf -s \
    tests/gpu/test_shared_expert_gpu.py >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|shared expert" \
    "$OUT/gpu_tests.log" | tail -12
  for variant in control dense; do
    extra=""; [ "$variant" = dense ] && extra="--shared-expert-max-rows 16384"
    mkdir -p "$OUT/$variant"
    # shellcheck disable=SC2086
    timeout 200 python3 bench/prefill.py --out "$OUT/$variant" --no-eager $extra \
      >"$OUT/prefill_$variant.log" 2>&1
    echo "prefill $variant rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill_$variant.log" \
      | grep -v "^USDT" | grep -E "^\| (4096|16384) \||expert|busy|_linear" | head -14
  done ;;
esac
rm -f "$OUT/install.log"
