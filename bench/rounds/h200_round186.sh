#!/usr/bin/env bash
# Device round 186 (session 38) (≈ 3 min): Nsight Compute on the 4K prefill's memory-bound
# kernels, each default once (bench/rest_kernels.py --ncu: a small process — round 184
# profiled them inside a whole prefill, whose device-memory save / restore per replay let it
# reach 3 kernels in 220 s) — DRAM-bound or not; and hc_coeffs' launch configs at 4K
# (bench/mhc_prefill.py).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 60 python3 bench/mhc_prefill.py --tokens 4096 >"$OUT/mhc.log" 2>&1
echo "mhc_prefill rc=$?"; grep -E "^\| 4096" "$OUT/mhc.log"
if [ -n "$NCU" ]; then
  timeout 200 "$NCU" --clock-control none --profile-from-start off --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats python3 bench/rest_kernels.py --ncu >"$OUT/ncu_rest.log" 2>&1
  echo "ncu rc=$?"
  grep -E "^  _[a-z_0-9]+kernel|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Grid Size|Block Size|Waves Per SM|Mem Busy|Max Bandwidth|Warp Cycles Per Issued" \
    "$OUT/ncu_rest.log" | sed 's/  */ /g' | head -110
fi
rm -f "$OUT/install.log"
