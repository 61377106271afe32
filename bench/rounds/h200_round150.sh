#!/usr/bin/env bash
# Ran at the commit named in bench/results/2026-12-02-h200-session27/README.md; the SS and WS
# kernels (moe_gluon_w4a16_ss / _ws), their --ss / --ws rows and ncu_probe's gemm-ss / gemm-ws
# were removed afterwards (slower than the shipped kernel): check out 0857b46 to rerun.
# Device round 150 (session 27): Nsight Compute on one gated prefill expert GEMM at 4K tokens —
# the register-A kernel (shipped), the SS kernel and its warp-specialized form (8 decoder
# warps): tensor-pipe activity, shared-memory traffic and bank conflicts, issue and stall
# figures. Rounds 147-149: SS / WS correct and bit-identical, 2.1-2.4 ms per call against the
# shipped 1.75-1.92, whatever the decode's warps (≈ 4 min). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
if [ -z "$NCU" ]; then echo "no ncu on this machine"; exit 0; fi
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis_Tables"
GMMA=$("$NCU" --query-metrics --chip gh100 2>/dev/null | awk '/^sm__pipe_tensor_op_gmma_cycles_active|^sm__inst_executed_pipe_tensor_op_gmma/ {print $1 ".avg.pct_of_peak_sustained_active"}' | paste -sd, -)
SMEM="l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,l1tex__throughput.avg.pct_of_peak_sustained_active"
echo "gmma metrics: $GMMA"
KEYS="Duration|Throughput|Issue|Issued|Eligible|IPC|Ipc|Warp Cycles|Active Warps|Registers|gmma|wavefronts|bank|inst_executed|cycles_elapsed|Shared|L1/TEX Hit|Bank|stall"
for kind in gemm-w4a16 gemm-ss gemm-ws; do
  timeout 150 "$NCU" --clock-control none --profile-from-start off \
    -k regex:"_w4a16_(prefill|ss|ws)_kernel" -c 1 $SECTIONS \
    --metrics "${SMEM}${GMMA:+,$GMMA}" \
    python3 bench/ncu_probe.py $kind --tokens 4096 >"$OUT/ncu_$kind.log" 2>&1
  echo "== $kind rc=$?"; grep -E "$KEYS" "$OUT/ncu_$kind.log" | sed 's/  */ /g' | head -45
done
rm -f "$OUT/install.log"
