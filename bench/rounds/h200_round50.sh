#!/usr/bin/env bash
# Device round 50 (session 12): the prefill at the session's final defaults (the FP8 prefill
# projections at BK 32, 4 stages after round 49a; the shared expert dense at every row count),
# saving the Triton cache (linear_decode's kernels included) for the next session's warm start.
# Carry the triton-cache parts. One call (≈ 2 min).
export SAVE_TRITON_CACHE=1
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 bench/prefill.py --out "$OUT" --no-eager >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -16
rm -f "$OUT/install.log"
