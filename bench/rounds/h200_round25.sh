#!/usr/bin/env bash
# Device round 25 (≈ 6 min): the GPU checks of session 8's changes (gemm_q8 decode tiles, word-order
# expert stacks, radix top-k, decode attention v2), then their benches in one run: top-k stage vs
# radix (bench/topk_decode.py), decode attention v1 vs v2 (bench/attention_decode.py), and the FP8
# projections at 64/128 rows with wider tiles (bench/gemm_decode.py).
source "$(dirname "$0")/../device_setup.sh"
timeout 240 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu/test_gemm_side_gpu.py \
  tests/gpu/test_attention_side_gpu.py >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -8
timeout 90 python3 bench/topk_decode.py >"$OUT/topk.log" 2>&1
echo "topk rc=$?"; grep "^|" "$OUT/topk.log" | head -30
for q in "64 4096" "256 32768"; do set -- $q
  timeout 60 python3 bench/attention_decode.py --queries $1 --context $2 --variants 16:64:2:2:8:1,v2,v2:64:64:8:1:2,v2:64:64:8:1:4,v2:32:64:8:1:1,v2:32:64:8:1:2 \
    >"$OUT/attn_$1.log" 2>&1
  echo "attention $1 x $2 rc=$?"; grep "^|" "$OUT/attn_$1.log" | head -12
done
timeout 150 python3 bench/gemm_decode.py --rows 64 128 --variants \
  default,bf16,64x128x128:4:4:0,64x256x128:3:4:0,64x128x128:4:8:0,64x128x64:6:4:0,128x128x128:3:8:0,128x128x64:4:8:0 \
  >"$OUT/gemm_decode.log" 2>&1
echo "gemm_decode rc=$?"; grep -A40 "All shapes" "$OUT/gemm_decode.log"
rm -f "$OUT/install.log"
