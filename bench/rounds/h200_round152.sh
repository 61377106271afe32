#!/usr/bin/env bash
# Ran at the commit named in bench/results/2026-12-02-h200-session27/README.md; the SS and WS
# kernels (moe_gluon_w4a16_ss / _ws), their --ss / --ws rows and ncu_probe's gemm-ss / gemm-ws
# were removed afterwards (slower than the shipped kernel): check out 0857b46 to rerun.
# Device round 152 (session 27): the WS kernel with two groups of wgmmas in flight per consumer
# (INFLIGHT 2: the decoded tile of group n - 2 freed after group n's issue) against one, token
# ring 3 deep, 4 and 8 decoder warps, at 1K / 4K / 8K tokens, bit for bit against the shipped
# kernel (round 151: even without its decode the WS kernel took 2.0 ms at 4K against the
# register-A loop's 1.5) (≈ 2 min). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 300 python3 bench/moe_gluon_prefill.py --tokens 1024 4096 8192 --bm 128 --warpgroups 2 \
  --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 4 --skip-triton \
  --ws 2:3:4:1 3:3:4:2 3:3:8:2 3:4:4:2 --ss-compare >"$OUT/moe_ws.log" 2>&1
echo "bench rc=$?"; grep -E "^\| [0-9]|bit-identical|Error" "$OUT/moe_ws.log" | cut -d'|' -f2-8,11 \
  | sed 's/bit-identical to the shipped kernel/bits/'
rm -f "$OUT/install.log"
