#!/usr/bin/env bash
# Device round 38 (≈ 3 min): the Gluon decode expert GEMM v2 — weight tiles through a TMA ring
# (4 or 6 stages, no register prefetch), the accumulators waited at the end of each step (an
# in-flight accumulator across the loop edge made ptxas serialize every wgmma) — against the
# Triton kernels in the same run (bench/moe_gluon_decode.py). Carry round 35a's Triton cache.
source "$(dirname "$0")/../device_setup.sh"
timeout 300 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 16 8 --stages 4 6 \
  >"$OUT/gluon.log" 2>&1
echo "gluon rc=$?"; grep -E "^\||Error|error|mismatch" "$OUT/gluon.log" | head -40
rm -f "$OUT/install.log"
