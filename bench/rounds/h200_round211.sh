#!/usr/bin/env bash
# Device round 211 (session 42) (≈ 2.5 min; ran as two direct calls): `linear_wide`'s token tile
# at 4,096 rows — BT 128 against the default 256 (bits and µs: is the wave quantization of the
# small-output projections, wkv's 128 programs on 264 slots, worth a smaller tile?). The first
# call's baseline is gemm_q8's FP8 kernel (`default`), the second's `wide_config`'s launch (`gl`),
# against which the diff column is the bits question. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 240 python3 bench/gemm_decode.py --rows 4096 \
  --variants default,gl:1:128:64:4:w1,gl:1:128:64:3:w1,gl:2:128:64:4:w1 >"$OUT/wide_bt_vs_fp8.log" 2>&1
timeout 240 python3 bench/gemm_decode.py --rows 4096 \
  --variants gl,gl:1:128:64:4:w1,gl:2:128:64:4:w1,gl:1:256:64:3:w1,gl:2:256:64:4:w1 \
  >"$OUT/wide_bt.log" 2>&1
echo "rc=$?"; grep "^|" "$OUT/wide_bt.log" | cut -c1-120
rm -f "$OUT/install.log"
