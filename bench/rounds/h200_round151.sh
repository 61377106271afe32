#!/usr/bin/env bash
# Ran at the commit named in bench/results/2026-12-02-h200-session27/README.md; the SS and WS
# kernels (moe_gluon_w4a16_ss / _ws), their --ss / --ws rows and ncu_probe's gemm-ss / gemm-ws
# were removed afterwards (slower than the shipped kernel): check out 0857b46 to rerun.
# Device round 151 (session 27): the no-decode probe (--probe-no-decode: the weight words go
# to the scale and the wgmmas without the integer EXTRACT; wrong values, a timing probe) on the
# shipped register-A kernel, the SS kernel and the WS kernel (4 and 8 decoder warps) at 1K /
# 4K / 8K tokens: is the SS / WS structure faster than the register-A loop once the decode's
# integer work is gone (≈ 2 min)? Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 300 python3 bench/moe_gluon_prefill.py --tokens 1024 4096 8192 --bm 128 --warpgroups 2 \
  --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 4 --skip-triton --probe-no-decode \
  --ss 3:3 --ws 2:3:4 2:4:8 >"$OUT/moe_probe.log" 2>&1
echo "bench rc=$?"; grep -E "^\| [0-9]|PROBE|Error" "$OUT/moe_probe.log" | cut -d'|' -f2-8
rm -f "$OUT/install.log"
