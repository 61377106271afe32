#!/usr/bin/env bash
# Device round 36 (≈ 4 min): decode at 64 x 4K and 256 x 32K with the per-kernel profile, mHC
# coefficients bf16x3 at decode's BM 16 (round 35b ran BM 32: slower in graph replay).
# Carry round 35a's Triton cache.
source "$(dirname "$0")/../device_setup.sh"
timeout 300 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
  --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
  | grep -E "^\| (64|256) \||_hc_|_moe_gemm|busy|start-up|idle" | head -30
rm -f "$OUT/install.log"
