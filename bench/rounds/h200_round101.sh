#!/usr/bin/env bash
# Device round 101 (session 19): `linear_wide` at 4,096 rows is L2-bound (round 100: L2 at 83 %
# of its peak, the tensor pipe at 54 %): more weight rows per token tile cut the L2 bytes per
# FLOP. Two warpgroups lost before (round 88a) at the 256-row launch's 3 stages, where one
# program per SM keeps only two stages in flight: here with deeper rings.
#   PART=a (≈ 2 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 300 python3 bench/gemm_decode.py --rows 4096 --reps 5 --variants \
    gl,gl:1:256:64:4:w1,gl:2:256:64:3:w1,gl:2:256:64:4:w1,gl:2:256:64:5:w1,gl:2:128:64:4:w1,gl:2:128:64:6:w1,gl:4:128:64:4:w1,gl \
    >"$OUT/gemm.log" 2>&1
  echo "gemm rc=$?"; grep -E "^\||total|sum" "$OUT/gemm.log" | head -90 ;;
esac
rm -f "$OUT/install.log"
