#!/usr/bin/env bash
# Device round 174 (session 35) (≈ 4 min): the hc_expand_norm check at 1 / 64 / 4,096 rows with
# h bounded against the fp64 chain from the kernel's own y (round 170: the one-step check against
# the separate kernels failed at 4,096 rows), and round 173's GPU checks of the eighths and the
# wgmma turns (bits; round 172 timed both end to end: eighths +0.1 %, turns +4.6 %).
# Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
timeout 120 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_mhc_norm_gpu.py -k "expand_norm" >"$OUT/mhc.log" 2>&1
echo "hc_expand_norm rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|fp64 chain" "$OUT/mhc.log" \
  | cut -c1-160
timeout 200 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_moe_gluon_gpu.py -k "eighths or pingpong or pipeline_matches" \
  >"$OUT/moe.log" 2>&1
echo "moe checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/moe.log" | tail -4
grep -E "^\| w4a16 prefill eighths" "$OUT/moe.log" | cut -c1-110
rm -f "$OUT/install.log"
