#!/usr/bin/env bash
# Device round 157 (session 28): round 156 found the producer-warp kernel 5-9 % faster per GEMM
# at 4K tokens (REP 2, one warpgroup), level at 1K / 2K / 8K. Now also two consumer warpgroups
# of two A fragments (256 weight rows a program from two weight boxes a step, one token tile
# for both: half the token reads per weight row; one program per SM, 3 stages fit): GPU bit
# checks, then the GEMMs at 4K (twice) and 8K against the base kernel's engine shapes (≈ 4 min).
# Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
moe() {  # $1 log name, the rest bench/moe_gluon_prefill.py's arguments
  local name=$1; shift
  timeout 170 python3 bench/moe_gluon_prefill.py --bm 128 --warpgroups 2 --skip-triton "$@" \
    >"$OUT/moe_$name.log" 2>&1
  echo "bench $name rc=$?"; grep -E "^\| [0-9]|False|Error|error" "$OUT/moe_$name.log" \
    | grep -v "all launches" | cut -d'|' -f2,3,4,5,6,7
  grep -c "bit-identical to this BM's first config: True" "$OUT/moe_$name.log"
}
timeout 200 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_moe_gluon_gpu.py \
  -k "w4a16_prefill_ws" >"$OUT/gpu_ws.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_ws.log" | tail -6
moe 4k --tokens 4096 4096 --w4a16-bm 128 --w4a16-stages 2 3 --w4a16-wg 1 2 --w4a16-rep 2 \
  --w4a16-parts 4 --w4a16-kernel base ws
moe 8k --tokens 8192 --w4a16-bm 128 --w4a16-stages 2 3 --w4a16-wg 2 --w4a16-rep 1 2 \
  --w4a16-parts 4 --w4a16-kernel base ws
rm -f "$OUT/install.log"
