#!/usr/bin/env bash
# Device round 156 (session 28): the prefill expert GEMM with its TMA issue on a producer warp
# (moe_gluon_w4a16_prefill_ws: the consumer loop 495-499 SASS instructions a 128-K step against
# the base kernel's 555-571, 3 partition barriers against 7 CTA barriers and a MEMBAR; launch
# cap 128 registers so two programs of 4 + 4 warps fit an SM, the consumer at 216 by setmaxnreg).
# a: GPU checks (WS bits = base bits at every quarter fill, the pipeline with KERNEL ws), then
#    the GEMMs base / base:168 / ws at the engine's shapes: 1K / 2K BM 64 REP 2 (stages 2, 3),
#    4K BM 128 REP 2 (twice), 8K BM 128 on two warpgroups and REP 2 (≈ 5 min).
# b: a lone 4K prompt end to end, base and ws interleaved (≈ 3 min).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a) timeout 240 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_moe_gluon_gpu.py \
     -k "w4a16_prefill" >"$OUT/gpu_ws.log" 2>&1
   echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_ws.log" | tail -6
   moe_prefill_bench small --tokens 1024 2048 \
     --w4a16-bm 64 --w4a16-stages 2 3 --w4a16-wg 1 --w4a16-rep 2 \
     --w4a16-parts 4 --w4a16-kernel base base:168 ws
   moe_prefill_bench 4k --tokens 4096 4096 \
     --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 1 --w4a16-rep 2 \
     --w4a16-parts 4 --w4a16-kernel base ws
   moe_prefill_bench 8k --tokens 8192 \
     --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 1 --w4a16-rep 1 2 \
     --w4a16-parts 4 --w4a16-kernel base ws ;;
b) mkdir -p /tmp/j
   for i in 1 2; do
     for k in base ws; do
       timeout 120 python3 bench/prefill.py --prompt-lens 4096 --repeats 5 --no-eager \
         --no-profile --w4a16-kernel $k --out /tmp/j >"$OUT/prefill_${k}_$i.log" 2>&1
       echo "$k $i rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_${k}_$i.log"
     done
   done ;;
esac
rm -f "$OUT/install.log"
