#!/usr/bin/env bash
# Device round 24 (≈ 3 min): decode-sized FP8 projections (bench/gemm_decode.py) — gemm_q8 launch
# configs at 1, 8 and 64 rows against the HBM roofline, as CUDA graphs of 20 launches (the decode
# step's FP8 projections took 1.39 ms of 23.5 at 64 x 4K in round 22, ~η 0.17).
source "$(dirname "$0")/../device_setup.sh"
timeout 400 python3 bench/gemm_decode.py --rows 1 8 64 --variants \
  default,bf16,64x64x128:6:4:0,64x32x128:6:4:0,64x32x128:8:4:0,64x128x128:4:4:0,64x64x128:4:4:0,64x64x256:3:4:0,64x64x64:8:4:0,64x64x128:6:4:2,64x64x128:6:4:4,64x64x128:6:4:8,64x32x128:6:4:4,16x64x128:6:4:0,16x64x128:6:4:4,16x128x128:4:4:0,16x32x128:6:4:4 \
  >"$OUT/gemm_decode.log" 2>&1
echo "gemm_decode rc=$?"; grep -A80 "All shapes" "$OUT/gemm_decode.log"
rm -f "$OUT/install.log"
