#!/usr/bin/env bash
# Device round 46 (prepared in session 11, not run: device time spent). Carry the triton-cache
# parts (round 44's, in the repo root). One call, ≈ 3 min:
#   the W4A8 prefill GPU checks, with the EXPANDED kernel (token scales pre-expanded into
#   int32 exponents in the accumulator's column order: 311 instead of 390 instructions per K
#   step per thread in the sm_90 SASS, 126 registers), then bench/moe_gluon_prefill.py with
#   and without it at 4K / 16K tokens, 32 / 64 pairs per program. If EXPANDED wins, make it
#   run_experts_w4a8_prefill's default and re-run the prefill table (bench/prefill.py).
source "$(dirname "$0")/device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_moe_gluon_gpu.py \
  -k prefill >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|prefill" "$OUT/gpu_tests.log" | tail -16
timeout 240 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 64 --stages 3 \
  --warpgroups 1 --expanded 0 1 >"$OUT/prefill_gemm.log" 2>&1
echo "prefill gemm rc=$?"; grep -E "^\||Error|error" "$OUT/prefill_gemm.log" | head -30
rm -f "$OUT/install.log"
