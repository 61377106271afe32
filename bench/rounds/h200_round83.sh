#!/usr/bin/env bash
# Device round 83 (session 17): the prefill expert GEMM pipelined per 32-K group — the next
# group's bits extracted (integer instructions) while this group's wgmmas run, scaled (bf16x2
# FMAs) after the wait; the weight words carried as int32 (112 registers, was 127). Round 82's
# kernel (23ff5aa; bench/_old/, untracked, carried with the tree) timed in the same run.
#   PART=a (≈ 5 min): GPU checks, the GEMMs of both versions, the expert pipeline at 4K / 16K.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_moe_gluon_gpu.py \
    -k "w4a16" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "$OUT/tests.log" | tail -4
  timeout 200 python3 bench/w4a16_probe.py --probe base --module package bench/_old/_old_pf16.py \
    package >"$OUT/probe.log" 2>&1
  echo "probe rc=$?"; grep -E "^\| |Error" "$OUT/probe.log"
  timeout 100 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 --warpgroups 1 \
    --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 4 >"$OUT/moe_prefill.log" 2>&1
  echo "moe_gluon_prefill rc=$?"; grep -E "^\| [0-9]+ \| w4a16" "$OUT/moe_prefill.log" ;;
esac
rm -f "$OUT/install.log"
