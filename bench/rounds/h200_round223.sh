#!/usr/bin/env bash
# Device round 223 (session 45) (≈ 3 min): what the decode costs the 4K expert GEMM on the
# producer-warp kernel — its consumer warps spend ~61 % of their samples in the decode's
# integer / bf16x2 instructions (round 222's per-instruction sampling) — with the
# --probe-no-decode timing probe (the weight words scaled as they are: wrong values), at the
# one ring and a weight ring of 6 stages (what is left once the decode is gone: the TMA waits).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 bench/moe_gluon_prefill.py --tokens 4096 --w4a16-bm 128 \
  --w4a16-stages 2 --w4a16-wg 1 --w4a16-rep 2 --w4a16-parts 8 --w4a16-kernel ws \
  --ws-weight-stages 0 6 --probe-no-decode --skip-triton >"$OUT/moe_nodecode.log" 2>&1
echo "no-decode probe rc=$?"; grep -E "^\| [0-9]|PROBE" "$OUT/moe_nodecode.log" | cut -c1-150
rm -f "$OUT/install.log"
