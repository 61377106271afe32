#!/usr/bin/env bash
# Device round 217 (session 44) (≈ 7 min): the pairs attention's GPU checks (now also at heads of
# 64 channels: 8-byte row copies; the split kernel deleted); with it as the prefill default,
# bench/h200_slice_check.py (8 prompts x 8 tokens, 2 against the GPU reference: graphs vs
# eager, Triton vs the reference, divergences explained by logit margins).
source "$(dirname "$0")/../device_setup.sh"
timeout 90 python3 -m pytest -q -p no:warnings -s tests/gpu/test_attention_side_gpu.py \
  -k "pairs or bf16_rows" >"$OUT/gpu_attention.log" 2>&1
echo "attention tests rc=$?"; grep -E "FAILED|Error|attention_prefill_pairs|bf16 rows N=1024" \
  "$OUT/gpu_attention.log" | cut -c1-150 | tail -14
timeout 300 python3 bench/h200_slice_check.py --prompts 8 --tokens 8 --ref-prompts 2 \
  --out "$OUT" >"$OUT/slice_check.log" 2>&1
echo "slice check rc=$?"; tail -14 "$OUT/slice_check.log" | cut -c1-160
rm -f "$OUT/install.log"
