#!/usr/bin/env bash
# Device round 12 (one call, ≈ 5 min): round 11's winners are the defaults now (expert tilings,
# index-score key tiles, mHC split-K, prefill-sized FP8 projections on the bf16-decode kernel).
# The changed kernels' GPU checks, where the FP8 projections' bf16-decode path overtakes the FP8
# kernel (64-1,024 rows: sets linear.BF16_DECODE_MIN_ROWS), one 4K prefill with the eager torch
# reference's 512-token probe (the issue's baseline, never measured at prefill yet) and decode at
# batch 64 / 4K with its per-kernel profile.
source "$(dirname "$0")/../device_setup.sh"
timeout ${GPU_TESTS_TIMEOUT:-120} python3 -m pytest -q -p no:cacheprovider -m gpu -rf \
  tests/gpu/test_attention_side_gpu.py tests/gpu/test_gemm_side_gpu.py \
  -k "index_scores or mhc or bf16_rows or accuracy or linear_quant_act" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -6
grep -E "linear_quant_act (fp8|registered)" "$OUT/gpu_tests.log" | head -16
timeout 90 python3 bench/gemm_prefill_choice.py --rows 64 256 1024 >"$OUT/gemm_choice.log" 2>&1
echo "gemm_prefill_choice rc=$?"; grep "^|" "$OUT/gemm_choice.log"
timeout ${PREFILL_TIMEOUT:-150} python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 \
  --eager-probe-len 512 --eager-budget-s 50 --repeats 2 >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -20
timeout ${DECODE_TIMEOUT:-120} python3 bench/decode.py --out "$OUT" --batches 64 \
  --contexts 4096 --no-eager --profile-points 64x4096 >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -28
rm -f "$OUT/install.log"
