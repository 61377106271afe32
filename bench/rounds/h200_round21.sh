#!/usr/bin/env bash
# Device round 21 (one call, ≈ 4 min; the last ~7 min of this session's device time): 8-warp
# decode expert tiles under a 128-register cap (2 programs x 8 warps = 16 warps per SM, against
# 3 x 4 at the 168 cap; SM90 compile: 16 B or no spill) and 8-warp down tilings, at 64 and 256
# tokens, then decode 64 / 256 x 4K with the fastest at 64.
source "$(dirname "$0")/../device_setup.sh"
CONFIGS=16x64x256:1:4:4:0:1:2@168,16x64x256:1:4:4:0:1:2@168/128x128:4:4
CONFIGS=$CONFIGS,16x64x256:1:8:4:0:1:2@128,16x128x128:1:8:4:0:1:2@128
CONFIGS=$CONFIGS,16x64x256:1:8:4:0:1:2@128/128x128:8:4,16x128x128:1:8:4:0:1:2@128/128x128:8:4
CONFIGS=$CONFIGS,16x64x256:1:4:4:0:1:2@168/128x128:8:4,16x64x256:1:4:4:0:1:2@168/128x128:4:6
for n in 64 256; do
  timeout 100 python3 bench/moe_decode.py --tokens --config-tokens $n --configs $CONFIGS \
    >"$OUT/moe_$n.log" 2>&1
  echo "moe $n rc=$?"; grep -A11 "W4A16 tilings" "$OUT/moe_$n.log"
done
decode_with_fastest_moe "$OUT/moe_64.log"
rm -f "$OUT/install.log"
