#!/usr/bin/env bash
# Device round 41 (session 11). Carry the triton-cache parts (round 35a's).
#   PART=a (≈ 4 min): the Gluon GPU checks, with the new W4A8 prefill kernel
#     (tests/gpu/test_moe_gluon_gpu.py), and bench/moe_gluon_prefill.py: the prefill kernel at
#     32 / 64 pairs per program and 3 / 4 stages, each GEMM and the whole pipeline against
#     Triton's run_experts at 4K and 16K tokens.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_moe_gluon_gpu.py \
    >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|prefill" "$OUT/gpu_tests.log" | tail -12
  timeout 300 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 64 --stages 3 4 \
    >"$OUT/prefill_gemm.log" 2>&1
  echo "prefill gemm rc=$?"; grep -E "^\||Error|error" "$OUT/prefill_gemm.log" | head -50 ;;
esac
rm -f "$OUT/install.log"
