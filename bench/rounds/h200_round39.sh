#!/usr/bin/env bash
# Device round 39 (≈ 2 min): the W4A8 Gluon decode expert GEMM (kernels/triton/moe_gluon_w4a8.py:
# e2m1 -> e4m3 by bit moves, FP8 wgmma per 32-K group, fp32 promotion) — first GPU run:
# accuracy against the fp32 reference on the Q8_32 values and GB/s, beside the bf16 Gluon
# kernel and the Triton kernels (bench/moe_gluon_decode.py). Carry round 35a's Triton cache.
source "$(dirname "$0")/../device_setup.sh"
timeout 300 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages 4 \
  --w4a8-stages 4 6 >"$OUT/gluon.log" 2>&1
echo "gluon rc=$?"; grep -E "^\||Error|error|mismatch" "$OUT/gluon.log" | head -40
rm -f "$OUT/install.log"
