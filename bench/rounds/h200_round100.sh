#!/usr/bin/env bash
# Device round 100 (session 19): Nsight Compute's speed-of-light, compute and memory sections
# of the two prefill kernels whose bound is unsettled — `linear_wide` at 4,096 rows (wo_b: L2
# traffic of the re-read token tiles?) and the Gluon prefill attention at 4,096 queries (the
# tensor pipe, shared memory or the chain?).
#   PART=a (≈ 3 min).
source "$(dirname "$0")/../device_setup.sh"
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy"
KEYS="Duration|Throughput|Pipe|Busy|Bandwidth|Hit Rate|Achieved Occupancy|Registers|Shared Memory|Executed Ipc|Issue Slots|Max Bandwidth|L2|L1"
case "${PART:-a}" in
a)
  if [ -z "$NCU" ]; then echo "no ncu on this machine"; exit 0; fi
  timeout 200 "$NCU" --clock-control none --profile-from-start off -k regex:_linear_wide \
    -c 1 $SECTIONS python3 bench/ncu_probe.py projection --tokens 4096 --shape wo_b \
    --variant gl >"$OUT/ncu_linear_wide.log" 2>&1
  echo "ncu linear_wide rc=$?"; grep -E "$KEYS" "$OUT/ncu_linear_wide.log" | head -60
  timeout 200 "$NCU" --clock-control none -k regex:_attn_prefill_ws -c 1 $SECTIONS \
    python3 bench/attention_prefill.py --variants float:g:64:64:1:2 \
    >"$OUT/ncu_attention.log" 2>&1
  echo "ncu attention rc=$?"; grep -E "$KEYS" "$OUT/ncu_attention.log" | head -60 ;;
esac
rm -f "$OUT/install.log"
