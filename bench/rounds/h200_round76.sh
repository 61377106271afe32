#!/usr/bin/env bash
# Device round 76 (session 16): the bf16 prefill expert GEMM with quarter fills
# (`moe_gluon_w4a16_prefill.PARTS = 4`: a block runs N = BM / 4, BM / 2, BM / 2 + BM / 4 — two
# accumulators on the same decoded registers — or BM, by the quarters that hold pairs; at 4K
# tokens ~half the experts' blocks hold 65-96 pairs and ran N = 128) and the token gather with
# 8 slots per program and a loop over K (was 2.9 ms of the 4K prefill: ~74K slots x 5 programs).
#   PART=a (≈ 5 min): GPU checks (tests/gpu/test_moe_gluon_gpu.py -k w4a16: every quarter fill
#     against the reference, the pipelines), bench/moe_gluon_prefill.py at 4K / 16K tokens with
#     parts 1 / 2 / 4 (BM 128, 2 stages, 2 warpgroups), then Nsight Compute on the three GEMM
#     launches of a 4K-token call (tensor pipe, L2 / DRAM / shared throughput, warp stalls).
#   PART=b (≈ 5 min): the 4K / 16K prefill with --w4a16-prefill-parts 4 (profiled), then 4K at
#     the default (2), unprofiled, for the same-machine comparison.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -s \
    tests/gpu/test_moe_gluon_gpu.py -k "w4a16" >"$OUT/w4a16_tests.log" 2>&1
  echo "w4a16 GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" \
    "$OUT/w4a16_tests.log" | tail -6; grep -E "^\| w4a16|^w4a16" "$OUT/w4a16_tests.log" | head -24
  timeout 240 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 --warpgroups 1 \
    --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 1 2 4 >"$OUT/moe_prefill.log" 2>&1
  echo "moe_gluon_prefill rc=$?"; grep -E "^\| [0-9]" "$OUT/moe_prefill.log" | grep -v "w4a8 " \
    | head -30
  if [ -n "$NCU" ]; then
    M=$(ncu_stall_metrics)
    M="$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
    M="$M,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
    M="$M,lts__throughput.avg.pct_of_peak_sustained_elapsed"
    M="$M,dram__throughput.avg.pct_of_peak_sustained_elapsed"
    M="$M,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed"
    M="$M,lts__t_bytes.sum,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active"
    M="$M,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"
    timeout 150 "$NCU" --clock-control none --profile-from-start off -k regex:_w4a16_prefill \
      --metrics "$M" python3 bench/ncu_probe.py experts-w4a8 --tokens 4096 \
      >"$OUT/ncu_w4a16_4096.log" 2>&1
    echo "ncu rc=$?"
    grep -E "_w4a16_prefill_kernel|stalled|inst_executed|bytes|warps_active|gmma|throughput|duration" \
      "$OUT/ncu_w4a16_4096.log" | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' \
      | awk '$NF != "0" && $NF !~ /^0\.0/' | head -60
  else
    echo "no ncu on this machine"
  fi ;;
b)
  timeout 260 python3 bench/prefill.py --out "$OUT" --no-eager --w4a16-prefill-parts 4 \
    >"$OUT/prefill.log" 2>&1
  echo "prefill (parts 4) rc=$?"
  sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -24
  timeout 120 python3 bench/prefill.py --prompt-lens 4096 --no-eager --no-profile \
    --w4a16-prefill-parts 2 >"$OUT/prefill_parts2.log" 2>&1
  echo "prefill 4K (parts 2) rc=$?"; grep -E "^\| 4096" "$OUT/prefill_parts2.log" ;;
esac
rm -f "$OUT/install.log"
