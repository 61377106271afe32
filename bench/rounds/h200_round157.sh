#!/usr/bin/env bash
# Device round 157 (session 28): round 156 found the producer-warp kernel 5-9 % faster per GEMM
# at 4K tokens (REP 2, one warpgroup), level at 1K / 2K / 8K. Now also two consumer warpgroups
# of two A fragments (256 weight rows a program from two weight boxes a step, one token tile
# for both: half the token reads per weight row; one program per SM, 3 stages fit): GPU bit
# checks, then the GEMMs at 4K (twice) and 8K against the base kernel's engine shapes (≈ 4 min).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_moe_gluon_gpu.py \
  -k "w4a16_prefill_ws" >"$OUT/gpu_ws.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_ws.log" | tail -6
moe_prefill_bench 4k --tokens 4096 4096 \
     --w4a16-bm 128 --w4a16-stages 2 3 --w4a16-wg 1 2 --w4a16-rep 2 \
  --w4a16-parts 4 --w4a16-kernel base ws
moe_prefill_bench 8k --tokens 8192 \
     --w4a16-bm 128 --w4a16-stages 2 3 --w4a16-wg 2 --w4a16-rep 1 2 \
  --w4a16-parts 4 --w4a16-kernel base ws
rm -f "$OUT/install.log"
