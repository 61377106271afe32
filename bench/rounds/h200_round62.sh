#!/usr/bin/env bash
# Device round 62 (session 14): why the FP8 projections at 256 rows run at ~0.3 of the bf16
# tensor rate (`_linear_decode_kernel` 2.59 ms per 256 x 32K step, round 60; the seven slice
# shapes 232.7 µs against ~80 µs of bf16 FLOPs). Hypothesis: every 64-row weight tile reads all
# of x from L2 (2 * 256 / 64 = 8 bytes of x per weight byte).
# Carry the triton-cache parts.
#   PART=a (≈ 4 min): bench/gemm_decode.py at 128 / 256 rows: linear_decode's default against
#     the rows-on-M tiles of `_linear_kernel` with 256-row M tiles (the weight decoded once,
#     x 2 N / BN bytes per weight byte); then Nsight Compute on linear_decode (wo_b, wq_b) at
#     256 rows: L2 / DRAM / tensor-pipe throughput and the stall breakdown.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  V="wm,bf16:128x128x32:4:8:w2,bf16:256x128x32:3:8:w2,bf16:256x128x32:4:8:w2,\
bf16:256x128x32:3:8:w1,bf16:256x128x32:3:8:w3,bf16:128x256x32:3:8:w2,bf16:256x128x64:3:8:w2,\
bf16:128x256x64:3:8:w2,bf16:256x256x32:2:16:w2,bf16:256x64x32:4:8:w2"
  timeout 300 python3 bench/gemm_decode.py --rows 128 256 --variants "$V" \
    >"$OUT/gemm_decode.log" 2>&1
  echo "gemm_decode rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode.log"
  grep -iE "failed|error|resources" "$OUT/gemm_decode.log" | head -8
  [ -n "$NCU" ] || { echo "no ncu on this machine"; exit 0; }
  M=$(ncu_stall_metrics)
  M="$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
  M="$M,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
  M="$M,lts__t_bytes.sum,l1tex__throughput.avg.pct_of_peak_sustained_active,launch__registers_per_thread"
  M="$M,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,launch__grid_size"
  for S in wo_b wq_b; do
    timeout 100 "$NCU" --clock-control none --profile-from-start off -k regex:_linear_decode_kernel \
      --metrics "$M" python3 bench/ncu_probe.py projection --tokens 256 --shape $S \
      >"$OUT/ncu_$S.log" 2>&1
    echo "ncu $S rc=$?"
    grep -E "stalled|inst_executed|bytes|warps_active|gmma|throughput|duration|registers|grid_size" \
      "$OUT/ncu_$S.log" | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' \
      | awk '{print $1, $(NF)}' | head -40
  done ;;
esac
rm -f "$OUT/install.log"
