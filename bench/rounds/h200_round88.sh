#!/usr/bin/env bash
# Device round 88 (session 17): linear_wide's launch at prefill rows (4,096: the 4K prefill's
# projections, 24 ms of it in round 85): wide_config's WG 1 / BT 256 against two warpgroups
# per token tile (half the token tile's L2 reads per FLOP) and BT 128.
#   PART=a (≈ 3 min): bench/gemm_decode.py at 4,096 rows, the seven slice projections.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 190 python3 bench/gemm_decode.py --rows 4096 --reps 5 \
    --variants gl,gl:2:128:64:4:w1,gl:1:128:64:4:w1,gl:2:256:64:2:w1 >"$OUT/gemm.log" 2>&1
  echo "gemm_decode rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm.log"
  grep -E "^\| (wo_b|wq_b|shared w1)" "$OUT/gemm.log" | head -12 ;;
esac
rm -f "$OUT/install.log"
