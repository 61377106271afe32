#!/usr/bin/env bash
# Device round 59 (session 13). The logit head now takes bf16 y with fp32 logits
# (linear(..., out_dtype=torch.float32): the one-loop bf16 kernel; round 58a: the fp32-x
# kernel took 1099.7 µs at 256 rows, 395.2 at 64, and most of its tilings did not fit shared
# memory); linear_decode splits K for 3 waves above 128 rows (round 58a: 246.3 -> 232.7 µs).
# One call (≈ 6 min): the head GPU checks, bench/gemm_head.py (fp32x vs bf16x tilings), then
# decode 64 / 256 x 4K / 32K with profiles. Carry the triton-cache parts.
source "$(dirname "$0")/../device_setup.sh"
timeout 100 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_gemm_side_gpu.py \
  -k "linear_head or linear_decode" >"$OUT/head_tests.log" 2>&1
echo "head GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|head bf16 x fp32 out" \
  "$OUT/head_tests.log" | tail -8
timeout 150 python3 bench/gemm_head.py --rows 64 256 --variants \
  fp32x,bf16x,bf16x:128x256x64:3:8,bf16x:128x128x32:4:8,bf16x:64x128x64:4:4,bf16x:64x256x64:4:4 \
  >"$OUT/gemm_head.log" 2>&1
echo "gemm_head rc=$?"; grep -E "^\||HBM|Error" "$OUT/gemm_head.log" | head -18
timeout 220 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
  --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
  | grep -E "^\| (64|256) \||busy|_w4a8|_linear|_splitk|start-up|idle|target" | head -20
rm -f "$OUT/install.log"
