#!/usr/bin/env bash
# Device round 28 (≈ 3 min): the radix top-k at the decode graph's row width (16,384 wide rows,
# 1,024 / 8,192 visible: the run-time path choice of RADIX_SMALL_TILE), and the FP8 projections
# at 128 / 256 rows (gemm_q8 decode tiles vs the bf16 path the engine takes at >= 256 rows).
# BASE_DIR (optional): a folder of kernels/triton/*.py copies to run with instead of the tree's
# (files another change is still editing; round 28 ran with the copies of commit 3358c76 while
# helpers edited indexer.py, mxfp4_unpack.py, moe_experts.py and moe_align.py).
source "$(dirname "$0")/../device_setup.sh"
if [ -n "${BASE_DIR:-}" ]; then cp "$BASE_DIR"/*.py kernels/triton/; fi
timeout 150 python3 bench/topk_decode.py --rows 64 256 --entries 1024 8192 --width 16384 \
  --variants 8:4096:8,8:4096:8:0,4:4096:8,4:4096:8:0 >"$OUT/topk.log" 2>&1
echo "topk rc=$?"; grep "^|" "$OUT/topk.log" | head -40
timeout 60 python3 bench/topk_decode.py --rows 256 --entries 1024 8192 --width 16384 --ties \
  --variants 8:4096:8,4:4096:8 >"$OUT/topk_ties.log" 2>&1
echo "topk ties rc=$?"; grep "^|" "$OUT/topk_ties.log" | tail -6
timeout 200 python3 bench/gemm_decode.py --rows 128 256 --variants \
  default,bf16,64x128x128:4:4:0,64x128x128:3:4:0,128x128x128:3:8:0,128x128x64:4:8:0,64x64x128:6:4:0,128x64x128:4:4:0,64x256x128:3:8:0 \
  >"$OUT/gemm_decode.log" 2>&1
echo "gemm rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode.log"; grep -E "failed|Error" "$OUT/gemm_decode.log" | head -5
rm -f "$OUT/install.log"
