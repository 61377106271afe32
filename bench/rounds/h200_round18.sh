#!/usr/bin/env bash
# Device round 18 (one call, ≈ 4 min): Nsight Compute on the two decode kernels furthest from
# their bytes — the routed-expert GEMMs (η 0.34 of their MXFP4 bytes) and the decode sparse
# attention (~1 % of HBM in bench/attention_decode.py) — at 64 and 256 tokens: speed of light,
# occupancy, warp stall reasons, scheduler issue rate, memory traffic. Clocks left alone
# (--clock-control none, device/METHOD.md).
source "$(dirname "$0")/../device_setup.sh"
which ncu || ls /opt/nvidia/nsight-compute/*/ncu
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
for what in "experts 64" "experts 256" "attention 64" "attention 256"; do
  set -- $what
  timeout 150 "$NCU" --clock-control none --profile-from-start off $SECTIONS \
    python3 bench/ncu_probe.py "$1" --tokens "$2" >"$OUT/ncu_$1_$2.log" 2>&1
  echo "ncu $1 $2 rc=$?"
  grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Block Limit|L2 Hit|Stall" "$OUT/ncu_$1_$2.log" | grep -v "^    ---" | head -60
done
rm -f "$OUT/install.log"
