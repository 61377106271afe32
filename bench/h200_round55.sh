#!/usr/bin/env bash
# Device round 55 (prepared in session 12, not run): Nsight Compute on the W4A8 Gluon prefill
# expert GEMM at 4,096 tokens (51 % of the 4K prefill; 13-16 % of the FP8 peak; the EXPANDED
# variant's 20 % fewer instructions bought nothing in round 46a, so it is not issue-bound in
# the plain sense): speed of light, occupancy and the warp-stall breakdown, as round 53 did
# for the decode kernel. One call (≈ 2 min). Carry the triton-cache parts.
source "$(dirname "$0")/device_setup.sh"
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
M=$(ncu_stall_metrics)
M="$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
timeout 200 "$NCU" --clock-control none --profile-from-start off -k regex:_w4a8_prefill \
  --metrics "$M" python3 bench/ncu_probe.py experts-w4a8 --tokens 4096 \
  >"$OUT/ncu_prefill_4096.log" 2>&1
echo "ncu rc=$?"
grep -E "_w4a8_prefill_kernel|stalled|inst_executed|dram__bytes|warps_active|gmma|throughput|duration" \
  "$OUT/ncu_prefill_4096.log" | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' \
  | head -70
rm -f "$OUT/install.log"
