#!/usr/bin/env bash
# Device round 52 (session 12; one call, ≈ 3 min): Nsight Compute on the W4A8 Gluon decode
# expert pipeline (the SM90 default) at 64 and 256 tokens — why its GEMMs read the touched
# experts' bytes at ~0.84 of HBM at batch 64 but ~0.72 at 256 (session 12's decode profiles):
# speed of light, occupancy, launch stats, warp states, memory traffic. Clocks left alone
# (--clock-control none, device/METHOD.md). Carry the triton-cache parts.
source "$(dirname "$0")/../device_setup.sh"
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis"
for tokens in 64 256; do
  timeout 120 "$NCU" --clock-control none --profile-from-start off -k regex:_w4a8_decode \
    $SECTIONS python3 bench/ncu_probe.py experts-w4a8 --tokens "$tokens" \
    >"$OUT/ncu_w4a8_$tokens.log" 2>&1
  echo "ncu experts-w4a8 $tokens rc=$?"
  grep -E "^  [_a-z]+.*\(|Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Grid Size|Waves Per SM|Warp Cycles Per Issued|Stall|L2 Hit" \
    "$OUT/ncu_w4a8_$tokens.log" | grep -v "^    ---" | head -40
done
rm -f "$OUT/install.log"
