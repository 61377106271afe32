#!/usr/bin/env bash
# Device round 110 (session 20): Nsight Compute on the W4A8 decode expert GEMMs at 256 tokens
# (the engine's decode layout, shipped boxes): why the down GEMM (K = 2,304) reaches ~0.65 of
# HBM and the gated one ~0.8 — speed of light, memory workload, occupancy, warp stalls.
#   PART=a (≈ 3 min).
source "$(dirname "$0")/../device_setup.sh"
SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats"
KEYS="Duration|Throughput|Busy|Bandwidth|Hit Rate|Achieved Occupancy|Theoretical Occupancy|Registers|Shared Memory|Block Limit|Grid Size|Waves|dram__|stalled|inst_executed|warps_active"
case "${PART:-a}" in
a)
  if [ -z "$NCU" ]; then echo "no ncu on this machine"; exit 0; fi
  timeout 200 "$NCU" --clock-control none --profile-from-start off \
    -k regex:_w4a8_decode_kernel -c 2 $SECTIONS --metrics "$(ncu_stall_metrics)" \
    python3 bench/ncu_probe.py experts-w4a8 --tokens 256 >"$OUT/ncu_w4a8.log" 2>&1
  echo "ncu rc=$?"; grep -E "$KEYS|_w4a8_decode_kernel" "$OUT/ncu_w4a8.log" | head -120 ;;
esac
rm -f "$OUT/install.log"
