#!/usr/bin/env bash
# Device round 2: the tiny model through the engine on the GPU (Triton vs GPU reference vs CPU
# reference), then the roofline of the slice plan against ceilings measured on this GPU.
source "$(dirname "$0")/../device_setup.sh"
timeout 330 python3 bench/h200_model_check.py --out "$OUT" >"$OUT/model_check.log" 2>&1
model_rc=$?
deepinfer-compile builtin:v41-flash-slice-h200 -o /tmp/slice-plan >/dev/null 2>&1
timeout 120 python3 bench/roofline.py /tmp/slice-plan --json "$OUT/roofline_slice.json" \
  >"$OUT/roofline.log" 2>&1
tail -45 "$OUT/model_check.log"
echo "model_check rc=$model_rc"
cat "$OUT/roofline.log"
