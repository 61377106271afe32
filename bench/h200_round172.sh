#!/usr/bin/env bash
# Device round 172 (session 33; after rounds 171 and 173) (≈ 6 min): the lone 4K prompt with
# sessions 33-34's prepared launches in one process (bench/prefill_ab.py: one model load, the variants
# interleaved, 3 rounds of 3 prefills each, the fixed prompt's tokens and top-2 logprobs
# compared across variants): all off, all on, and each alone — the persistent linear_wide for
# 256-row tiles (--linear-wide-persistent-rows 1024), its 16-byte stores on the base kernel
# (--linear-wide-vec-store-rows 1024), the prefill expert GEMMs' 16-byte stores
# (--w4a16-vec-store 1), the prefill expert GEMM's eighths (--w4a16-prefill-parts 8, session
# 34) and its wgmma turns (--w4a16-pingpong 1, session 34). Make a default only what wins end to
# end (and passed rounds 171 / 173's checks). Ran in session 35 at commit 1b29779 (an H100): the
# turns +4.6 %, removed since, and the persistent linear_wide (no gain here or in round 174) —
# both variants are gone from this script. Pass the commit
# hash literally.
source "$(dirname "$0")/device_setup.sh"
flags() {  # linear_wide vec rows, expert vec, expert parts
  echo "--linear-wide-vec-store-rows $1 --w4a16-vec-store $2 --w4a16-prefill-parts $3"
}
timeout 560 python3 bench/prefill_ab.py --prompt-len 4096 --rounds 3 --repeats 3 \
  --variant "off=$(flags 0 0 4)" --variant "on=$(flags 1024 1 8)" \
  --variant "wide_vec=$(flags 1024 0 4)" --variant "expert_vec=$(flags 0 1 4)" \
  --variant "eighths=$(flags 0 0 8)" \
  --out "$OUT" >"$OUT/prefill_ab.log" 2>&1
echo "prefill_ab rc=$?"; grep -E "^\||median|equal across|^load" "$OUT/prefill_ab.log"
rm -f "$OUT/install.log"
