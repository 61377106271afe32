#!/usr/bin/env bash
# Ran at the commit named in bench/results/2026-12-02-h200-session27/README.md; the SS and WS
# kernels (moe_gluon_w4a16_ss / _ws), their --ss / --ws rows and ncu_probe's gemm-ss / gemm-ws
# were removed afterwards (slower than the shipped kernel): check out 0857b46 to rerun.
# Device round 148 (session 27): moe_gluon_w4a16_ws (the SS kernel of round 147 with a decoder
# warpgroup feeding two consumer warpgroups through mbarriers) — GPU checks of SS and WS (bit
# for bit against the shipped kernel), then WS at rings 2:3, 2:4, 3:3 against the shipped
# register-A kernel at 1K / 4K / 8K tokens (≈ 4 min). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_moe_gluon_gpu.py -k "w4a16_ss" -s \
  >"$OUT/gpu_ss.log" 2>&1
echo "gpu checks rc=$?"; grep -E "vs register-A|w4a16 (ss|ws)|passed|failed|Error" "$OUT/gpu_ss.log" \
  | cut -c1-110 | head -30
timeout 300 python3 bench/moe_gluon_prefill.py --tokens 1024 4096 8192 --bm 128 --warpgroups 2 \
  --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 4 --skip-triton \
  --ws 2:3 2:4 3:3 --ss-compare >"$OUT/moe_ws.log" 2>&1
echo "bench rc=$?"; grep -E "^\| [0-9]|bit-identical|Error" "$OUT/moe_ws.log" | cut -d'|' -f2-8,11
rm -f "$OUT/install.log"
