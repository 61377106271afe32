#!/usr/bin/env bash
# Device round 84 (session 17): the prefill expert GEMM with its own weight ring
# (WEIGHT_STAGES deep, the token ring STAGES = 2): round 83 left it ~0.42 of the bf16 rate at
# 4K tokens whatever its instruction count; ncu (round 76a) had long-scoreboard stalls on top.
#   PART=a (≈ 5 min): GPU checks, the GEMMs at weight rings of 4 (default) / 2 / 3 and 4
#     again (the run's noise), the expert pipeline at 4K / 16K.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_moe_gluon_gpu.py \
    -k "w4a16" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "$OUT/tests.log" | tail -4
  timeout 240 python3 bench/w4a16_probe.py --probe base --sets - WEIGHT_STAGES=2 \
    WEIGHT_STAGES=3 - >"$OUT/probe.log" 2>&1
  echo "probe rc=$?"; grep -E "^\| |Error" "$OUT/probe.log"
  timeout 100 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 --warpgroups 1 \
    --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 4 >"$OUT/moe_prefill.log" 2>&1
  echo "moe_gluon_prefill rc=$?"; grep -E "^\| [0-9]+ \| w4a16" "$OUT/moe_prefill.log" ;;
esac
rm -f "$OUT/install.log"
