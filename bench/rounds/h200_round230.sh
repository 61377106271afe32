#!/usr/bin/env bash
# Device round 230 (session 46) (≈ 3 min): linear_ss with 16-byte output stores
# (store_layout) and N 256 unless half the SMs idle: its GPU tests, then the seven slice
# projections at 4,096 rows against linear_wide (gl) and torch.matmul on the same weight
# (cublas). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 240 python3 -m pytest -q -m gpu -s -p no:cacheprovider tests/gpu/test_linear_ss_gpu.py \
  >"$OUT/gpu_linear_ss.log" 2>&1
echo "gpu tests rc=$?"; tail -4 "$OUT/gpu_linear_ss.log" | cut -c1-200
timeout 300 python3 bench/gemm_decode.py --rows 4096 --variants \
  gl,ss,ss:128x256x64:4,ss:128x128x64:4,cublas >"$OUT/dense_ss.log" 2>&1
echo "gemm_decode rc=$?"; grep -E "^\|" "$OUT/dense_ss.log" | cut -c1-120
rm -f "$OUT/install.log"
