#!/usr/bin/env bash
# Device round 153 (session 27): the register-A prefill expert GEMM with two A fragments per
# warpgroup (REP 2: 128 weight rows on one warpgroup, the per-step bookkeeping paid once for
# both; sm_90 SASS: 4.46 instructions per weight against 5.38, but 208 registers: 8 warps per
# SM against 16) — GPU checks, then against the shipped 2 warpgroups x 64 rows at 1K / 4K / 8K,
# bit for bit (≈ 3 min). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_moe_gluon_gpu.py -k "w4a16_prefill_gluon" \
  -s >"$OUT/gpu_rep.log" 2>&1
echo "gpu checks rc=$?"; grep -E "rep2|passed|failed|Error" "$OUT/gpu_rep.log" | cut -c1-110 | head -12
timeout 300 python3 bench/moe_gluon_prefill.py --tokens 1024 4096 8192 --bm 128 --warpgroups 2 \
  --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 1 --w4a16-parts 4 --w4a16-rep 1 2 \
  --skip-triton >"$OUT/moe_rep.log" 2>&1
echo "bench rc=$?"; grep -E "^\| [0-9]|bit-identical|Error" "$OUT/moe_rep.log" | cut -d'|' -f2-8,11
rm -f "$OUT/install.log"
