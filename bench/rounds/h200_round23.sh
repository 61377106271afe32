#!/usr/bin/env bash
# Device round 23 (ran in session 8, ≈ 2.5 min; docs/performance.md): MXFP4 word order (kernels/triton/mxfp4_words.py, SASS
# 960 -> 788 instructions per decode K step) — its GPU bit-identity checks with the other expert
# checks, the "mxfp4 bf16 words" rows next to checkpoint order at 1-256 tokens, and the w: tilings
# at 64 and 256 tokens (same run). Run with SAVE_TRITON_CACHE=1: the carried cache predates
# session 7's expert tilings (round 22 compiled them during graph capture).
source "$(dirname "$0")/../device_setup.sh"
timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu/test_gemm_side_gpu.py \
  -k "moe" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -8
timeout 150 python3 bench/moe_decode.py --tokens 1 8 64 256 --config-tokens 64 --configs \
  16x64x256:1:4:4:0:1:2@168/128x128:4:4,w:16x64x256:1:4:4:0:1:2@168/128x128:4:4,w:16x64x256:1:4:4:0:1:2/128x128:4:4 \
  >"$OUT/moe_64.log" 2>&1
echo "moe rc=$?"; grep "^|" "$OUT/moe_64.log" | head -30
timeout 60 python3 bench/moe_decode.py --tokens --config-tokens 256 --configs \
  16x64x256:1:4:4:0:1:2@168/128x128:4:4,w:16x64x256:1:4:4:0:1:2@168/128x128:4:4 \
  >"$OUT/moe_256.log" 2>&1
echo "moe 256 rc=$?"; grep -A4 "W4A16 tilings" "$OUT/moe_256.log"
timeout 60 python3 bench/moe_decode.py --tokens --config-tokens 4096 --configs \
  64x64x128:1:4:4:0:1:2,w:64x64x128:1:4:4:0:1:2 >"$OUT/moe_4096.log" 2>&1
echo "moe 4096 rc=$?"; grep -A4 "W4A16 tilings" "$OUT/moe_4096.log"
rm -f "$OUT/install.log"
