#!/usr/bin/env bash
# Device round 58 (session 13). At 256 x 32K the logit head (`_linear_kernel`, fp32 x holding
# bf16 values against the bf16 head: ~0.87 ms at 256 rows, cuBLAS-class bf16 would be ~0.45)
# and the projections at 256 rows (`_linear_decode_kernel`, 2.7 ms) are the largest pieces
# after the routed experts. Carry the triton-cache parts.
#   PART=a (≈ 3 min): bench/gemm_head.py at 64 / 256 rows over tilings of the head's kernel;
#     bench/gemm_decode.py at 256 rows around round 57a's winner (token tiles of 64 / 128,
#     stages, BK 64).
#   PART=b (≈ 3 min): decode 64 / 256 x 4K / 32K with profiles, after the winners.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 240 python3 bench/gemm_head.py --rows 64 256 >"$OUT/gemm_head.log" 2>&1
  echo "gemm_head rc=$?"; grep -E "^\||HBM|Error" "$OUT/gemm_head.log" | head -30
  timeout 200 python3 bench/gemm_decode.py --rows 256 --variants \
    wm:64x32x128:4:4:w2,wm:64x32x64:4:4:w2,wm:64x32x64:4:4:w1,wm:64x32x128:3:4:w2,wm:64x32x128:5:4:w2,wm:64x64x128:4:4:w2,wm:64x32x128:4:4:w3 \
    >"$OUT/gemm_decode.log" 2>&1
  echo "gemm_decode rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode.log" ;;
b)
  timeout 230 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_w4a8|_linear|_splitk|start-up|idle|target" | head -20 ;;
esac
rm -f "$OUT/install.log"
