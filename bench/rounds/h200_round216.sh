#!/usr/bin/env bash
# Device round 216 (session 44) (≈ 7 min): the prefill attention with the math warpgroups on
# chunks of their own (kernels/triton/attention_prefill_pairs.py, FlashMLA's SM90 schedule) —
# its GPU checks against the reference and the split kernel, bench/attention_prefill.py (the
# 4K shape: split vs pairs), then the lone 4K prompt: the defaults (the split attention, the
# fused SwiGLU) against pairs and against the SwiGLU apart (round 213's A/B), the check tokens
# compared. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -q -p no:warnings -s tests/gpu/test_attention_side_gpu.py \
  -k "pairs or bf16_rows or gl_row_counts" >"$OUT/gpu_attention.log" 2>&1
echo "attention tests rc=$?"; grep -E "passed|failed|FAILED|Error|attention_prefill|bf16 rows" \
  "$OUT/gpu_attention.log" | cut -c1-150 | tail -24
timeout 90 python3 bench/attention_prefill.py --queries 4096 \
  --variants float:g:64:64:1:2,float:p:64:64:1:2,float:g:64:64:1:2,float:p:64:64:1:2 \
  >"$OUT/attention_prefill.log" 2>&1
echo "attention bench rc=$?"; grep -E "^\||ceiling" "$OUT/attention_prefill.log" | tail -8
prefill_ab_4k 2 "base=--attention-config g:64:64:1:2 --w4a16-fused-swiglu 1" \
  "pairs=--attention-config p:64:64:1:2 --w4a16-fused-swiglu 1" \
  "apart=--attention-config g:64:64:1:2 --w4a16-fused-swiglu 0"
rm -f "$OUT/install.log"
