#!/usr/bin/env bash
# Device round 31 (≈ 5 min): start-up with all the plan's decode buckets captured (36 graphs:
# what deepinfer-run does; earlier rounds captured the benchmarked batches only and estimated
# the rest), then the expert GEMMs' 3-stage gated tile and the down tile at a 128-register cap
# (round 29 had them 9-10 % faster at 64 tokens, 3-5 % slower at 256), in A/B/A/B order to see
# the drift within a run, at 64 / 128 / 256 tokens. Carry round 30's Triton cache.
source "$(dirname "$0")/../device_setup.sh"
timeout 300 python3 bench/decode.py --out "$OUT" --graph-buckets plan --batches 64 \
  --contexts 4096 --no-eager --no-profile --gap-prompts 8 --gap-tokens 16 \
  >"$OUT/decode_plan_buckets.log" 2>&1
echo "decode rc=$?"; grep -E "decode bucket (1|8|64|256):|start-up|first token|^\| 64 " \
  "$OUT/decode_plan_buckets.log" | grep -v "^USDT" | head -20
D=w:16x64x256:1:4:4:0:1:2@168/128x128:4:4
B=w:16x64x256:1:4:3:0:1:2@168/128x128:4:4@128
timeout 200 python3 bench/moe_decode.py --tokens --config-tokens 64 128 256 --configs \
  $D,$B,w:16x64x256:1:4:3:0:1:2@168/128x128:4:4,w:16x64x256:1:4:4:0:1:2@168/128x128:4:4@128,$D,$B \
  >"$OUT/moe.log" 2>&1
echo "moe rc=$?"; grep -E "^\|" "$OUT/moe.log" | head -30
rm -f "$OUT/install.log"
