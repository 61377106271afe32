#!/usr/bin/env bash
# Device round 68 (session 14): the session's final defaults checked end to end — every FP8
# projection from 64 rows on linear_wide (decode and prefill), the mHC prefill launch above
# 128 tokens.
# Carry the triton-cache parts (4).
#   PART=a (≈ 6 min): linear_wide's GPU checks (the dispatch at 63 / 64 / 256 / 1,000 rows),
#     then bench/h200_slice_check.py (8 prompts x 8 tokens: graphs vs eager vs static, Triton
#     vs the GPU reference with divergences explained by logit margins).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 110 python3 -m pytest -p no:cacheprovider -m gpu -rf -s -x \
    tests/gpu/test_linear_wide_gpu.py >"$OUT/wide_tests.log" 2>&1
  echo "linear_wide GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" \
    "$OUT/wide_tests.log" | tail -4; grep -E "^\| linear_quant" "$OUT/wide_tests.log" | head -4
  timeout 230 python3 bench/h200_slice_check.py --prompts 8 --tokens 8 --ref-prompts 4 \
    --out "$OUT" >"$OUT/slice_check.log" 2>&1
  echo "slice check rc=$?"; tail -14 "$OUT/slice_check.log" ;;
esac
rm -f "$OUT/install.log"
