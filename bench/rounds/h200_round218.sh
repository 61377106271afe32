#!/usr/bin/env bash
# Device round 218 (session 44, prepared) (≈ 3 min): Nsight Compute on the 4K expert pipeline's
# two producer-warp GEMMs (the gated one with its SwiGLU epilogue, the down one): HBM, L2,
# shared-memory and tensor-pipe throughput, issue by pipe, warp stalls — whether the experts'
# 36 ms (the H100's HBM floor for their weights 19.1 ms, its bf16 floor 17.8; round 216) is
# bound by the weights' stream or by the SMs' issue. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
if [ -n "$NCU" ]; then
  M=$(ncu_stall_metrics)
  M="$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
  M="$M,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
  M="$M,lts__throughput.avg.pct_of_peak_sustained_elapsed"
  M="$M,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum"
  M="$M,lts__t_bytes.sum,lts__t_sector_hit_rate.pct"
  M="$M,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed"
  M="$M,smsp__issue_active.avg.pct_of_peak_sustained_active"
  M="$M,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active"
  M="$M,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"
  timeout 120 "$NCU" --clock-control none --profile-from-start off -k regex:_w4a16_prefill \
    --metrics "$M" python3 bench/ncu_probe.py experts-w4a8 --tokens 4096 \
    >"$OUT/ncu_experts_4096.log" 2>&1
  echo "ncu rc=$?"
  grep -E "_w4a16_prefill|stalled|inst_executed|bytes|warps_active|gmma|throughput|duration|issue_active|hit_rate" \
    "$OUT/ncu_experts_4096.log" | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' \
    | awk '$NF != "0" && $NF !~ /^0\.0/' | cut -c1-130 | head -70
else
  echo "no ncu on this machine"
fi
rm -f "$OUT/install.log"
