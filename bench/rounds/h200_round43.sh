#!/usr/bin/env bash
# Device round 43 (session 11). Carry the triton-cache parts (round 35a's).
#   PART=a (≈ 4 min): the W4A8 prefill kernel with 1 / 2 / 4 warpgroups per program stacked on
#     the weight rows (one token tile: a quarter of the token traffic at 4): GPU checks, then
#     bench/moe_gluon_prefill.py at 4K / 16K tokens, 32 / 64 pairs per program.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_moe_gluon_gpu.py \
    -k prefill >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|prefill" "$OUT/gpu_tests.log" | tail -14
  timeout 240 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 64 --stages 3 \
    --warpgroups 1 2 4 >"$OUT/prefill_gemm.log" 2>&1
  echo "prefill gemm rc=$?"; grep -E "^\||Error|error" "$OUT/prefill_gemm.log" | head -40 ;;
esac
rm -f "$OUT/install.log"
