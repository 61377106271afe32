#!/usr/bin/env bash
# Device round 55 (prepared in session 12, not run): Nsight Compute on the W4A8 Gluon prefill
# expert GEMM at 4,096 tokens (51 % of the 4K prefill; 13-16 % of the FP8 peak; the EXPANDED
# variant's 20 % fewer instructions bought nothing in round 46a, so it is not issue-bound in
# the plain sense): speed of light, occupancy and the warp-stall breakdown, as round 53 did
# for the decode kernel (PART=a, ≈ 2 min); PART=b (≈ 2 min): the prefill projections on
# linear_decode (the decoded weight as the register A operand, token tiles of 128 / 256 rows)
# against the default bf16 tiles (round 49a: 3.48 ms for the seven slice shapes at 4,096 rows).
# Carry the triton-cache parts.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
M=$(ncu_stall_metrics)
M="$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
timeout 200 "$NCU" --clock-control none --profile-from-start off -k regex:_w4a8_prefill \
  --metrics "$M" python3 bench/ncu_probe.py experts-w4a8 --tokens 4096 \
  >"$OUT/ncu_prefill_4096.log" 2>&1
echo "ncu rc=$?"
grep -E "_w4a8_prefill_kernel|stalled|inst_executed|dram__bytes|warps_active|gmma|throughput|duration" \
  "$OUT/ncu_prefill_4096.log" | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' \
  | head -70 ;;
b)
  timeout 300 python3 bench/gemm_prefill_choice.py --rows 4096 --bf16-configs \
"128x128x32:4:8,wm:64x256x32:4:4,wm:64x256x32:3:4,wm:64x128x32:4:4,wm:128x256x32:3:8,\
wm:128x128x64:3:8" >"$OUT/gemm_prefill_wm.log" 2>&1
  echo "gemm_prefill rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_prefill_wm.log"
  grep -E "failed" "$OUT/gemm_prefill_wm.log" | head -5 ;;
esac
rm -f "$OUT/install.log"
