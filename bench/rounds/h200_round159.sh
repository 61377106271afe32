#!/usr/bin/env bash
# Device round 159 (session 28): the lone 4K prompt on KERNEL auto (the default since round
# 158) with its kernel table, host phases and a cProfile of its host work (where the host's
# 5-9 ms per layer go now, for the next host-side change) (≈ 2 min). Pass the commit hash
# literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --host-phases \
  --host-profile --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_4k.log"
sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" | cut -c1-150 \
  | grep -E "^\| 4096|GPU busy|^\| .(_w4a16|_linear_wide|_attn)" | head -8
rm -f "$OUT/install.log"
