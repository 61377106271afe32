#!/usr/bin/env bash
# Device round 227 (session 46) (≈ 3 min): the dense FP8 projections at 4,096 rows on bf16
# weights dequantized once (bench/gemm_decode.py ``dq``: ``_linear_kernel``'s tl.dot with both
# operands in shared memory; ``cublas``: torch.matmul on the same weight, a reference of what
# such a GEMM reaches) against ``linear_wide`` (the default: the FP8 weight decoded in
# registers, ~0.7 of bf16 at 4K). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 400 python3 bench/gemm_decode.py --rows 4096 --variants \
  gl,dq,dq:128x256x64:3:8,dq:128x256x64:4:8,dq:256x128x64:3:8,dq:128x128x64:3:8,cublas \
  >"$OUT/dense_bf16.log" 2>&1
echo "gemm_decode rc=$?"; grep -E "^\|" "$OUT/dense_bf16.log" | cut -c1-120
rm -f "$OUT/install.log"
