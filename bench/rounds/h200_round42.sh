#!/usr/bin/env bash
# Device round 42 (session 11). Carry the triton-cache parts (round 35a's).
#   PART=a (≈ 6 min): bench/moe_gluon_prefill.py with the scales prefetched one step ahead
#     (32 / 64 pairs per program, 3 stages, 4K / 16K tokens); then the prefill table with the
#     W4A8 layout (DI_EXPERT_ORDER=w4a8: run_experts sends prefill to
#     run_experts_w4a8_prefill, decode to run_experts_w4a8), SAVE_TRITON_CACHE=1.
#   PART=b (≈ 6 min): bench/h200_slice_check.py with the W4A8 layout (16 prompts x 8 tokens):
#     graphs vs eager token for token, and against the reference backend.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 64 --stages 3 \
    >"$OUT/prefill_gemm.log" 2>&1
  echo "prefill gemm rc=$?"; grep -E "^\||Error|error" "$OUT/prefill_gemm.log" | head -30
  export SAVE_TRITON_CACHE=1
  DI_EXPERT_ORDER=w4a8 timeout 360 python3 bench/prefill.py --out "$OUT" --no-eager \
    >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -30 ;;
b)
  DI_EXPERT_ORDER=w4a8 timeout 540 python3 bench/h200_slice_check.py --prompts 16 --tokens 8 \
    --ref-prompts 8 --out "$OUT" >"$OUT/slice_check.log" 2>&1
  echo "slice check rc=$?"; tail -30 "$OUT/slice_check.log" ;;
esac
rm -f "$OUT/install.log"
