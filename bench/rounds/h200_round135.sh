#!/usr/bin/env bash
# Device round 135 (prepared in session 23, not run: its device time was spent). Where the host's
# 6-12 ms per prefill layer go (round 132a): a lone 1K prompt's host work under cProfile (by own
# and by cumulative time; the worker's enqueue is in it on Python 3.12) with the host phases per
# layer; then decode 64 / 256 x 4K, a check that the experts' new dispatch (decode pipeline up to
# 10 pairs per expert, round 133) leaves decode steps as they were (session 22: 12.37-12.50 /
# 21.42 ms) (≈ 4 min). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a) timeout 150 python3 bench/prefill.py --prompt-lens 1024 --repeats 3 --no-eager --no-profile \
     --host-phases --host-profile --out "$OUT" >"$OUT/prefill_1024.log" 2>&1
   echo "prefill rc=$?"; grep -E "^prefill 1024" "$OUT/prefill_1024.log"
   sed -n '/^host phases/,/generate done/p' "$OUT/prefill_1024.log"
   grep -A45 "Ordered by: cumulative" "$OUT/prefill_1024.log" | cut -c1-150
   timeout 150 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 \
     --no-eager --no-profile >"$OUT/decode.log" 2>&1
   echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -9 ;;
esac
rm -f "$OUT/install.log"
