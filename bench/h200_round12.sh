#!/usr/bin/env bash
# Device round 12 (one call, ≈ 5 min): the changed kernels' GPU checks (indexer, mHC, float-row
# attention, expert accuracy), one 4K prefill (with the eager torch reference's 512-token probe:
# the baseline the performance issue asks for, never measured at prefill yet) and decode at
# batch 64 / 4K with its profile, with
# round 11's fastest expert tilings when given (MOE_PREFILL, MOE_DECODE: BMxBNxBK:split:warps:
# stages[:swap], bench/kernel_overrides.py; not yet defaults) — then make the winners defaults.
source "$(dirname "$0")/device_setup.sh"
timeout ${GPU_TESTS_TIMEOUT:-90} python3 -m pytest -q -p no:cacheprovider -m gpu -rf \
  tests/gpu/test_attention_side_gpu.py tests/gpu/test_gemm_side_gpu.py \
  -k "index_scores or mhc or bf16_rows or accuracy" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -6
timeout ${PREFILL_TIMEOUT:-150} python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 \
  --eager-probe-len 512 --eager-budget-s 50 --repeats 2 ${MOE_PREFILL:+--moe-config $MOE_PREFILL} \
  >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -16
timeout ${DECODE_TIMEOUT:-120} python3 bench/decode.py --out "$OUT" --batches 64 \
  --contexts 4096 --no-eager --profile-points 64x4096 ${MOE_DECODE:+--moe-config $MOE_DECODE} \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -24
rm -f "$OUT/install.log"
