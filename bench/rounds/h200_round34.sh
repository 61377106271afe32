#!/usr/bin/env bash
# Device round 34 (≈ 3 min): the Gluon decode expert GEMM (kernels/triton/moe_gluon.py: weights
# global -> registers -> wgmma, no shared-memory round trip) — first GPU run: correctness against
# the fp32 reference and GB/s, gated and down, 64 and 256 tokens, BM 16 and 8, beside the Triton
# kernels in the same run (bench/moe_gluon_decode.py). Carry round 30's Triton cache. What ran
# was commit 7f16720's kernel; since round 38 the file holds the TMA-ring version.
source "$(dirname "$0")/../device_setup.sh"
timeout 300 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 16 8 >"$OUT/gluon.log" 2>&1
echo "gluon rc=$?"; grep -E "^\||Error|error" "$OUT/gluon.log" | head -30
rm -f "$OUT/install.log"
