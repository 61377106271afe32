#!/usr/bin/env bash
# Device round 163 (prepared in sessions 29-30, not run): decode 64 / 256 x 4K (session 30:
# each block's decode graph drops ~6 launches — the collapses, norms and per-projection Q8_32
# roundings of its two sites fused into hc_expand_norm; launch arithmetic in plain Python); bench/moe_align.py (µs per call in CUDA graphs and host µs, the one-program and
# chunked paths against the torch version at 1 .. 32K tokens, MAX_PAIRS:CHUNK variants: where
# the chunks should take over); `chunk_check` of an 8K prompt in 8,192 / 2,048 / 1,024 chunks
# (the chunked align path runs at 2K and 8K chunks: tokens and logprobs bit-identical across
# chunkings) (≈ 6 min). Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
timeout 120 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 --no-eager \
  --no-profile >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -9
timeout 120 python3 bench/moe_align.py >"$OUT/moe_align.log" 2>&1
echo "moe_align rc=$?"; grep -E "^\|" "$OUT/moe_align.log" | cut -c1-110 | head -52
timeout 150 python3 bench/chunk_check.py --prompt-len 8192 --chunks 8192,2048,1024 \
  --prompts 1 --out /tmp/j >"$OUT/chunk8k.log" 2>&1
echo "chunk check rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk8k.log" | grep "^| [0-9]"
rm -f "$OUT/install.log"
