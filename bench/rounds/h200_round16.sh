#!/usr/bin/env bash
# Device round 16 (one call, ≈ 4 min): W_ONE_MUL expert tiles (one bf16x2 multiply per MXFP4
# weight pair where a program's scale bytes are all <= 128; SASS: 997 vs 1,186 instructions per
# decode K step) — bit-identity with the two-multiply unpack incl. fallback programs, accuracy,
# the tilings with and without it at 64 and 4,096 tokens, decode 64 / 256 at 4K with the fastest.
source "$(dirname "$0")/../device_setup.sh"
timeout 120 python3 -m pytest -s -p no:cacheprovider -m gpu -rf tests/gpu/test_gemm_side_gpu.py \
  -k "moe_one_mul or moe_experts_accuracy" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\| moe|passed|failed|Error" "$OUT/gpu_tests.log" | tail -12
timeout 90 python3 bench/moe_decode.py --tokens 64 --config-tokens 64 --configs \
  16x64x256:1:4:4:0:1,16x64x256:1:4:4:0:1:1,16x128x256:1:4:3:0:1:1,16x128x128:1:4:4:0:1:1 \
  >"$OUT/moe_64.log" 2>&1
echo "moe 64 rc=$?"; grep -A8 "W4A16 tilings" "$OUT/moe_64.log"
timeout 60 python3 bench/moe_decode.py --tokens 4096 --config-tokens 4096 --configs \
  64x64x128:1:4:4:0:1,64x64x128:1:4:4:0:1:1 >"$OUT/moe_4096.log" 2>&1
echo "moe 4096 rc=$?"; grep -A5 "W4A16 tilings" "$OUT/moe_4096.log"
decode_with_fastest_moe "$OUT/moe_64.log"
rm -f "$OUT/install.log"
