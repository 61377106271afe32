#!/usr/bin/env bash
# Ran at a072ab1 / 046e287: the PIPE loop and its flags (--w4a16-pipe, ncu_probe --w4a16-pipe)
# were removed after these rounds (no gain, session 26); check that commit out to rerun it.
# Device round 140 (session 25): the prefill expert GEMM's K loop with one group's wgmmas in
# flight while the next group is scaled (moe_gluon_w4a16_prefill PIPE) against the shipped
# loop (every group waited first).
#   PART=a (≈ 5 min): the kernel's GPU checks (both loops), then each GEMM (gated w1, down w2)
#     and the whole pipeline at 1K / 4K / 8K tokens, the two loops interleaved.
#   PART=b (≈ 4 min): Nsight Compute on the first gated GEMM at 1K and 4K tokens, both loops:
#     issue slots, eligible warps, warp stalls, the tensor pipe's activity — whether the
#     per-call constant (session 24, round 139a: ~1.07 ms) is instruction issue.
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_moe_gluon_gpu.py -k "w4a16_prefill" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
  timeout 360 python3 bench/moe_gluon_prefill.py --tokens 1024 4096 8192 \
    --bm 128 --warpgroups 2 --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 4 \
    --w4a16-pipe 0 1 --skip-triton >"$OUT/moe_pipe.log" 2>&1
  echo "moe rc=$?"; grep -E "^\||HBM" "$OUT/moe_pipe.log" | head -40 ;;
b)
  if [ -z "$NCU" ]; then echo "no ncu on this machine"; exit 0; fi
  SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy"
  KEYS="Duration|Throughput|Issue|Issued|Eligible|Ipc|IPC|Warp Cycles|Active Warps|Achieved Occupancy|Theoretical Occupancy|Registers|stalled|inst_executed|gmma|tensor"
  GMMA=$("$NCU" --query-metrics --chip gh100 2>/dev/null | awk '/^sm__pipe_tensor_op_gmma|^sm__inst_executed_pipe_tensor_op_gmma|^smsp__inst_executed_pipe_tensor_op_gmma/ {print $1 ".avg.pct_of_peak_sustained_active"}' | paste -sd, -)
  echo "gmma metrics: $GMMA"
  for t in 1024 4096; do
    for p in "" "--w4a16-pipe"; do
      tag=${t}${p:+_pipe}
      timeout 110 "$NCU" --clock-control none --profile-from-start off \
        -k regex:_w4a16_prefill_kernel -c 1 $SECTIONS \
        --metrics "$(ncu_stall_metrics)${GMMA:+,$GMMA}" \
        python3 bench/ncu_probe.py experts-w4a8 --tokens $t $p >"$OUT/ncu_$tag.log" 2>&1
      echo "ncu $tag rc=$?"; grep -E "$KEYS" "$OUT/ncu_$tag.log" | head -60
    done
  done ;;
esac
rm -f "$OUT/install.log"
