#!/usr/bin/env bash
# Device round 222 (session 45) (≈ 5 min): round 217's attention checks (the pairs kernel, at
# 64-channel heads too) and round 218's Nsight Compute on the 4K expert pipeline (HBM, L2
# bytes and hit rate, shared, tensor, issue, stalls). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 80 python3 -m pytest -q -p no:warnings -s tests/gpu/test_attention_side_gpu.py \
  -k "pairs or bf16_rows" >"$OUT/gpu_attention.log" 2>&1
echo "attention tests rc=$?"; grep -E "FAILED|Error|attention_prefill_pairs|bf16 rows N=1024" \
  "$OUT/gpu_attention.log" | cut -c1-150 | tail -14
bash "$(dirname "$0")/h200_round218.sh"
