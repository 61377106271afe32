#!/usr/bin/env bash
# Device round 197 (session 40) (≈ 7 min): the router's scores and the compressor's promoted
# projections under their prefill tilings at a 4K prompt's shape (bench/route_compress.py: µs,
# share of bf16, bits against the default), then the lone 4K prompt in one process
# (prefill_ab): session 39's defaults (the keys-on-M index scores at 128 keys / 8 warps, the
# router and compressor tiles as they were) against this session's (64 keys / 4 warps, the
# sweep's fastest tilings with the defaults' bits), then the lone 4K prompt at the defaults
# with its families. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 bench/route_compress.py --tokens 4096 >"$OUT/route_compress.log" 2>&1
echo "route_compress rc=$?"; grep -E "^\| (route|compress)|TFLOP" "$OUT/route_compress.log"
new=$(python3 bench/route_compress.py --pick "$OUT/route_compress.log")
old=$(python3 bench/route_compress.py --pick /dev/null)  # the defaults' values
echo "picked: $new"
prefill_ab_4k 3 \
  "s39=$old --launch-constant index_scores_keys_m.KEYS=128 --launch-constant index_scores_keys_m.NUM_WARPS=8" \
  "s40=$new --launch-constant index_scores_keys_m.KEYS=64 --launch-constant index_scores_keys_m.NUM_WARPS=4"
prefill_4k "_route_scores|_linear_kernel|_scores_keys"
rm -f "$OUT/install.log"
