#!/usr/bin/env bash
# Device round 40 (≈ 2 min): the W4A8 Gluon decode expert GEMM at 8 and 16 pairs per program and
# 3 / 4 TMA stages, beside the Triton kernels (bench/moe_gluon_decode.py, 64 and 256 tokens).
# Carry round 35a's Triton cache.
source "$(dirname "$0")/device_setup.sh"
timeout 200 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
  --w4a8-bm 8 16 --w4a8-stages 3 4 >"$OUT/gluon.log" 2>&1
echo "gluon rc=$?"; grep -E "^\||Error|error|mismatch" "$OUT/gluon.log" | head -40
rm -f "$OUT/install.log"
