#!/usr/bin/env bash
# Device round 3: the v41-flash-slice-h200 plan with CUDA graphs vs the reference backend
# (bench/h200_slice_check.py: 64 prompts with graphs, start-up, graphs vs eager, the reference
# backend on the shortest prompts).
source "$(dirname "$0")/../device_setup.sh"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
timeout ${SLICE_TIMEOUT:-480} python3 bench/h200_slice_check.py --prompts ${PROMPTS:-64} \
  --tokens ${TOKENS:-16} --ref-prompts ${REF_PROMPTS:-4} --out "$OUT" >"$OUT/slice_check.log" 2>&1
rc=$?
tail -95 "$OUT/slice_check.log"
echo "slice_check rc=$rc"
