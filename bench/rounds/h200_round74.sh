#!/usr/bin/env bash
# Device round 74 (session 15): the slice check at session 15's final defaults — RoPE in
# place on q and the attention output inside the decode graphs, the bf16 prefill experts (used
# from 1,025 tokens per chunk: the check's prompts are shorter, so they take the decode
# pipeline; the prefill kernel is checked by tests/gpu and bench/moe_gluon_prefill.py).
#   PART=a (≈ 4 min): bench/h200_slice_check.py, 8 prompts x 8 tokens, 2 against the GPU
#     reference (graphs vs eager vs static; Triton vs the reference with divergences explained
#     by logit margins).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 270 python3 bench/h200_slice_check.py --prompts 8 --tokens 8 --ref-prompts 2 \
    --out "$OUT" >"$OUT/slice_check.log" 2>&1
  echo "slice check rc=$?"; tail -12 "$OUT/slice_check.log" ;;
esac
rm -f "$OUT/install.log"
