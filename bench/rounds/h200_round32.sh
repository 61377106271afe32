#!/usr/bin/env bash
# Device round 32 (≈ 4 min): the candidate blocks through the radix select (the stage path
# sorted a graph-wide tile of 8,192 block keys with tl.topk(2048) every step: 192 µs at
# 64 x 4K, 298 µs at 256 x 32K in round 30) — the top-k GPU checks, then decode at 64 x 4K and
# 256 x 32K with the per-kernel profile. Carry round 30's Triton cache.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu/test_attention_side_gpu.py \
  -k "topk or candidate" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -6
timeout 240 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
  --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
  | grep -E "^\| (64|256) \||topk|candidate|block|_radix|busy|start-up|idle" | head -30
rm -f "$OUT/install.log"
