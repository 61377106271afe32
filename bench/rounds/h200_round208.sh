#!/usr/bin/env bash
# Device round 208 (session 41) (≈ 3 min): the gated GEMM and SwiGLU at the slice's 4K shape
# (bench/gated_swiglu.py: the two GEMMs, the SwiGLU, apart, and fused with its epilogue's
# forms — padding chunks skipped, every chunk with masked stores, none) — where the fused
# launch's extra time goes. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 bench/gated_swiglu.py --tokens 4096 >"$OUT/gated_swiglu.log" 2>&1
echo "gated_swiglu rc=$?"; tail -9 "$OUT/gated_swiglu.log"
rm -f "$OUT/install.log"
