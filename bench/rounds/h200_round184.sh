#!/usr/bin/env bash
# Device round 184 (session 37) (≈ 2-3 min): Nsight Compute on the 4K prefill's memory-bound
# kernels ("the rest": ~10 ms of round 179's 73 ms of GPU time; the larger ones at ~0.5-0.7 of
# their HBM floors by the cost model's bytes — `_hc_expand_collapse_kernel` 156 µs a call
# against ~89, `_hc_coeffs_kernel` 79 against ~39, `_swiglu_slots_kernel` 139 against ~80,
# `_gather_tokens_kernel` 105 against ~70, `_moe_combine_kernel` 85 against ~59): the first
# profiled launches of each in a lone 4K prefill (its warm-up), speed of light, memory tables,
# occupancy, launch shape — is DRAM their limit, or latency / occupancy / L2?
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
if [ -z "$NCU" ]; then echo "no ncu on this machine"; exit 0; fi
KREGEX="_hc_expand_collapse_kernel|_swiglu_slots_kernel|_gather_tokens_kernel|_moe_combine_kernel|_hc_coeffs_kernel|_rms_apply_kernel"
timeout 220 "$NCU" --clock-control none -k regex:"$KREGEX" -c 12 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  python3 bench/prefill.py --prompt-lens 4096 --repeats 1 --no-eager --no-profile \
  --out "$OUT/ncu" >"$OUT/ncu_rest.log" 2>&1
echo "ncu rc=$?"
grep -E "^  _[a-z_]+kernel|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Grid Size|Block Size|Waves Per SM|Max Bandwidth|Mem Busy" \
  "$OUT/ncu_rest.log" | sed 's/  */ /g' | head -130
rm -f "$OUT/install.log"
