#!/usr/bin/env bash
# Device round 44 (session 11): the W4A8 layout as the SM90 default (no DI_EXPERT_ORDER):
# decode at 64 / 256 x 4K / 32K with profiles, then the prefill table (4K, 16K); saves the
# Triton cache (the new Gluon kernels in it). One call, carry the triton-cache parts.
export SAVE_TRITON_CACHE=1
source "$(dirname "$0")/../device_setup.sh"
timeout 240 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
  --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
  | grep -E "^\| (64|256) \||_w4a8|_moe_gemm|busy|start-up|idle" | head -20
timeout 200 python3 bench/prefill.py --out "$OUT" --no-eager >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -14
rm -f "$OUT/install.log"
