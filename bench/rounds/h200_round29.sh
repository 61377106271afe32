#!/usr/bin/env bash
# Device round 29 (≈ 7 min): session 9's kernels — GPU checks (paged index scores v2, radix
# path choice, persistent expert GEMMs), the paged index scores v1 vs v2 at the slice's decode
# shapes (32 index heads; ratio-1 layers: 4,096 / 32,768 visible of 65,536-wide rows), the
# expert GEMMs default vs persistent at 64 / 256 tokens, the FP8 projections with split-K at
# 64-256 rows, then decode at 64 x 4K and 256 x 32K with the new defaults (per-kernel profile).
# The persistent expert kernel (the #P configs below) was removed after this round, measured
# slower: run this script at commit 11eb938 to repeat it.
# PART=a: checks and kernel benches; PART=b: FP8 projections and decode (two calls of < 10 min).
source "$(dirname "$0")/../device_setup.sh"
if [ "${PART:-a}" = a ]; then
timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu/test_gemm_side_gpu.py \
  tests/gpu/test_attention_side_gpu.py -k "index_scores or topk or moe or expert" \
  >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -8
timeout 150 python3 bench/index_decode.py --ratio 4 --heads 32 --width 65536 \
  --shapes 64:16384,256:16384,64:131072,256:131072 >"$OUT/index_decode.log" 2>&1
echo "index rc=$?"; grep -E "^\|" "$OUT/index_decode.log" | head -40
timeout 200 python3 bench/moe_decode.py --tokens --config-tokens 64 256 --configs \
  w:16x64x256:1:4:4:0:1:2@168/128x128:4:4,w:16x64x256:1:4:4:0:1:2@168#2/128x128:4:4,w:16x64x256:1:4:3:0:1:2@168/128x128:4:4,w:16x64x256:1:4:3:0:1:2@168#3/128x128:4:4,w:16x64x256:1:4:4:0:1:2@168/128x128:4:4@128,w:16x64x256:1:4:4:0:1:2@168/128x128:4:4@128#4,w:16x64x256:1:4:4:0:1:2@168/128x128:4:4#3,w:16x64x256:1:4:4:0:1:2@168#2/128x128:4:4@128#4,w:16x64x256:1:4:3:0:1:2@168#3/128x128:4:4@128#4,w:16x64x256:1:4:3:0:1:2@168#3/128x128:4:6@128#4 \
  >"$OUT/moe.log" 2>&1
echo "moe rc=$?"; grep -E "^\|" "$OUT/moe.log" | head -40
fi
if [ "${PART:-a}" = b ]; then
timeout 150 python3 bench/gemm_decode.py --rows 64 128 256 --variants \
  default,bf16,bf16:w1,bf16:w2,64x128x128:4:4:w1,64x128x128:4:4:w2,64x128x128:4:4:w4,64x64x128:6:4:w2 \
  >"$OUT/gemm_decode.log" 2>&1
echo "gemm rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode.log"; grep -E "failed|Error" "$OUT/gemm_decode.log" | head -5
timeout 200 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
  --no-eager --profile-points 64x4096,256x32768 >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -60
fi
rm -f "$OUT/install.log"
