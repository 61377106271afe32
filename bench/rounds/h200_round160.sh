#!/usr/bin/env bash
# Device round 160 (session 28): the producer-warp prefill expert GEMM's PIPE loop (two A
# register sets: a group scaled and issued while the one before it runs; session 25 tried it
# beside the TMA issue: no gain) — GPU bit checks (incl. PIPE), then the GEMMs at 4K (twice):
# base / ws / ws-pipe (≈ 3 min). Ran at f71c10c: PIPE gave nothing (gated level, down 2-11 %
# slower) and was removed after; run it from that commit. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_moe_gluon_gpu.py \
  -k "w4a16_prefill_ws" >"$OUT/gpu_ws.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_ws.log" | tail -6
timeout 150 python3 bench/moe_gluon_prefill.py --bm 128 --warpgroups 2 --skip-triton \
  --tokens 4096 4096 --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 1 --w4a16-rep 2 \
  --w4a16-parts 4 --w4a16-kernel base ws ws-pipe >"$OUT/moe_pipe.log" 2>&1
echo "bench rc=$?"; grep -E "^\| [0-9]|False|Error|error" "$OUT/moe_pipe.log" \
  | grep -v "all launches" | cut -d'|' -f2,3,4,5,6,7
grep -c "bit-identical to this BM's first config: True" "$OUT/moe_pipe.log"
rm -f "$OUT/install.log"
