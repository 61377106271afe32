#!/usr/bin/env bash
# Device round 10 (≈ 2.5 min): round 9's fastest prefill configs as the defaults — the GPU checks
# of the kernels they changed (float-row attention incl. a prefill-sized launch; the expert GEMMs'
# accuracy, 512 tokens over 16 experts being the prefill class) and one 4K prefill end to end.
source "$(dirname "$0")/../device_setup.sh"
timeout ${GPU_TESTS_TIMEOUT:-80} python3 -m pytest -q -p no:cacheprovider -m gpu -rf \
  tests/gpu/test_attention_side_gpu.py tests/gpu/test_gemm_side_gpu.py \
  -k "bf16_rows or accuracy" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -6
timeout ${PREFILL_TIMEOUT:-80} python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 \
  --no-eager --repeats 2 >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -16
rm -f "$OUT/install.log"
