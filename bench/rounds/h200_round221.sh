#!/usr/bin/env bash
# Device round 221 (session 45) (≈ 8 min): the lone 4K prompt end to end with the expert
# GEMMs' weights in a ring of their own 6 (and 4) stages ahead of the tokens' 2
# (moe_gluon_w4a16_prefill_ws.WEIGHT_STAGES) against the one ring (prefill_ab, 2 rounds:
# medians and the check tokens); then bench/h200_slice_check.py (8 prompts x 8 tokens, 2
# against the GPU reference) on the defaults. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
prefill_ab_4k 2 "one=--launch-constant moe_gluon_w4a16_prefill_ws.WEIGHT_STAGES=0" \
  "sw6=--launch-constant moe_gluon_w4a16_prefill_ws.WEIGHT_STAGES=6" \
  "sw4=--launch-constant moe_gluon_w4a16_prefill_ws.WEIGHT_STAGES=4"
timeout 300 python3 bench/h200_slice_check.py --prompts 8 --tokens 8 --ref-prompts 2 \
  --out "$OUT" >"$OUT/slice_check.log" 2>&1
echo "slice check rc=$?"; tail -14 "$OUT/slice_check.log" | cut -c1-160
rm -f "$OUT/install.log"
