#!/usr/bin/env bash
# Device round 27 (≈ 4 min): after session 8's review — the word-order conversion in one Triton
# launch on CUDA tensors (mxfp4_words.permute_words; round 26's load took 18.0 s, 12.7 s before
# word order) and the decode attentions' shared row-split pieces (attn_common): their GPU
# checks, then decode at 64 x 4K for the start-up and the step.
source "$(dirname "$0")/../device_setup.sh"
timeout 240 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu/test_gemm_side_gpu.py \
  tests/gpu/test_attention_side_gpu.py >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -8
timeout 200 python3 bench/decode.py --out "$OUT" --batches 64 --contexts 4096 --no-eager \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -24
rm -f "$OUT/install.log"
