#!/usr/bin/env bash
# Device round 210 (session 42) (≈ 2 min): the gated GEMM's SwiGLU epilogue in passes of 16, 32,
# 64 and 128 tokens (bench/gated_swiglu.py --chunks; moe_swiglu_epilogue.TOKEN_CHUNK), modes 0
# and 1, against the two GEMMs and the SwiGLU apart at the slice's 4K shape (round 208 on an
# H100: apart 3,315 µs, fused 3,306 at 32, the K loop alone 2,959). Pass the commit hash
# literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 300 python3 bench/gated_swiglu.py --tokens 4096 --chunks 16,32,64,128 \
  >"$OUT/gated_swiglu.log" 2>&1
echo "gated_swiglu rc=$?"; tail -14 "$OUT/gated_swiglu.log"
rm -f "$OUT/install.log"
