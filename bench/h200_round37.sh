#!/usr/bin/env bash
# Device round 37 (≈ 3 min): where the decode step's stray torch copies come from —
# bench/profile_decode.py --copies (the tiny triton plan, no graphs, torch.profiler with stacks).
source "$(dirname "$0")/device_setup.sh"
timeout 400 python3 bench/profile_decode.py --copies --prompts 8 --tokens 8 >"$OUT/copies.log" 2>&1
echo "copies rc=$?"; grep -v "^USDT" "$OUT/copies.log" | tail -120
rm -f "$OUT/install.log"
