#!/usr/bin/env bash
# Device round 104 (session 19): `linear_wide` at the decode sizes with two warpgroups per token
# tile and deeper rings (the 4,096-row finding, round 101a: one program per SM needs 4 stages),
# split-K over 1 / 2 waves: the projections of a 256-row decode step (1.77 ms of 256 x 32K).
#   PART=a (≈ 2 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 300 python3 bench/gemm_decode.py --rows 256 128 --reps 20 --variants \
    gl,gl:2:256:64:4:w1,gl:2:256:64:4:w2,gl:2:256:64:5:w1,gl:2:128:64:4:w2,gl:2:128:64:6:w2,gl \
    >"$OUT/gemm.log" 2>&1
  echo "gemm rc=$?"; grep -E "^\| (256|128) \|" "$OUT/gemm.log" | head -40 ;;
esac
rm -f "$OUT/install.log"
