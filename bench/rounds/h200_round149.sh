#!/usr/bin/env bash
# Ran at the commit named in bench/results/2026-12-02-h200-session27/README.md; the SS and WS
# kernels (moe_gluon_w4a16_ss / _ws), their --ss / --ws rows and ncu_probe's gemm-ss / gemm-ws
# were removed afterwards (slower than the shipped kernel): check out 0857b46 to rerun.
# Device round 149 (session 27): moe_gluon_w4a16_ws with two decoder warpgroups (8 warps, 96
# registers; round 148's one decoder warpgroup ran 2.09-2.12 ms per 4K gated call against the
# shipped kernel's 1.75: its SASS issues ~240 instructions a group from one warp per SM
# sub-partition) — GPU checks (bit for bit against the shipped kernel), then 8 and 4 decoder
# warps against the shipped kernel at 1K / 4K / 8K tokens (≈ 3 min). Pass the commit hash.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_moe_gluon_gpu.py -k "w4a16_ss and ws" -s \
  >"$OUT/gpu_ws.log" 2>&1
echo "gpu checks rc=$?"; grep -E "vs register-A|w4a16 ws|passed|failed|Error" "$OUT/gpu_ws.log" \
  | cut -c1-110 | head -20
timeout 300 python3 bench/moe_gluon_prefill.py --tokens 1024 4096 8192 --bm 128 --warpgroups 2 \
  --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 4 --skip-triton \
  --ws 2:3:8 2:4:8 3:3:8 2:3:4 --ss-compare >"$OUT/moe_ws.log" 2>&1
echo "bench rc=$?"; grep -E "^\| [0-9]|bit-identical|Error" "$OUT/moe_ws.log" | cut -d'|' -f2-8,11
rm -f "$OUT/install.log"
