#!/usr/bin/env bash
# Device round 163 (prepared in session 29, not run): decode 64 / 256 x 4K as a check (the
# decode path's launch arithmetic moved to plain Python: launch_math; nothing else changed
# there), and `chunk_check` of two 8K prompts in 8,192 / 2,048 / 1,024 chunks (the chunked
# align path runs at 8,192-token chunks: tokens and logprobs bit-identical across chunkings)
# (≈ 5 min). Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
timeout 120 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 --no-eager \
  --no-profile >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -9
timeout 300 python3 bench/chunk_check.py --prompt-len 8192 --chunks 8192,2048,1024 --tokens 4 \
  --prompts 2 --repeats 1 --out "$OUT" >"$OUT/chunk8k.log" 2>&1
echo "chunk_check rc=$?"; grep -v "^USDT" "$OUT/chunk8k.log" | tail -8
rm -f "$OUT/install.log"
