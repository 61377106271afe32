#!/usr/bin/env bash
# Device round 224 (session 45) (≈ 2 min): bench/wgmma_rate.py — the register-A bf16 wgmma's
# pace by N (16..128 tokens, the eighths' splits), REP 1 / 2, a wait per 32-K group or per
# step, 2 / 1 / 3 programs an SM: the tensor pace the 4K expert GEMM's loop shape can reach
# with nothing else in it (round 223: the GEMM is as fast without its decode). Pass the
# commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 bench/wgmma_rate.py >"$OUT/wgmma_rate.log" 2>&1
echo "wgmma_rate rc=$?"; grep -E "^\||ceiling" "$OUT/wgmma_rate.log" | cut -c1-120
rm -f "$OUT/install.log"
