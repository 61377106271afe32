#!/usr/bin/env bash
# Device round 60 (session 13): the logit head on 128x256x64 tiles at 65-256 rows (round 59:
# 851.8 -> 657.6 µs at 256 rows in bench/gemm_head.py). One call (≈ 3 min): the head GPU
# checks, then decode 64 / 256 x 4K / 32K with profiles. Carry the triton-cache parts.
source "$(dirname "$0")/../device_setup.sh"
timeout 80 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_gemm_side_gpu.py \
  -k "linear_head" >"$OUT/head_tests.log" 2>&1
echo "head GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|head bf16 x fp32 out" \
  "$OUT/head_tests.log" | tail -6
timeout 200 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
  --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
  | grep -E "^\| (64|256) \||busy|_w4a8|_linear|start-up|idle|target" | head -20
rm -f "$OUT/install.log"
