#!/usr/bin/env bash
# Device round 40 (≈ 3 min; prepared in session 10, not run: the device time was spent): the
# Gluon probes' GPU checks (tests/gpu/test_moe_gluon_gpu.py: both kernels against the fp32
# reference, the W4A8 pipeline against Triton's run_experts), then the W4A8 kernel at 8 and 16
# pairs per program and 3 / 4 TMA stages and the whole W4A8 decode pipeline
# (run_experts_w4a8) beside the Triton kernels (bench/moe_gluon_decode.py, 64 and 256 tokens);
# then bench/moe_decode.py with the "mxfp4 w4a8 order" variant (run_experts on W4A8-order
# weights: the Gluon pipeline at 64 / 256 tokens, the folded Triton tiles on that order at 4096)
# beside word order. Carry round 35a's Triton cache.
source "$(dirname "$0")/device_setup.sh"
timeout 240 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_moe_gluon_gpu.py \
  >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|^\| " "$OUT/gpu_tests.log" | tail -12
timeout 240 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
  --w4a8-bm 8 16 --w4a8-stages 3 4 >"$OUT/gluon.log" 2>&1
echo "gluon rc=$?"; grep -E "^\||Error|error|mismatch" "$OUT/gluon.log" | head -40
timeout 200 python3 bench/moe_decode.py --tokens 64 256 4096 --config-tokens 0 \
  >"$OUT/moe_decode.log" 2>&1
echo "moe_decode rc=$?"; grep -E "^\|" "$OUT/moe_decode.log" | head -20
rm -f "$OUT/install.log"
