#!/usr/bin/env bash
# Device round 79 (session 16): which launches the eager 4K prefill's GPU waits for (round 78a:
# 5 host syncs only, so the ~6.5 ms are launch-bound stretches), and a third sample of decode
# 256 x 32K (η 0.609 in round 75b, 0.600 in 77b).
#   PART=a (≈ 4 min): the 4K prefill, profiled (GPU idle charged to the activity that ended
#     each idle stretch: bench_common.idle_by_next) and under the sync debug mode; decode
#     256 x 32K, unprofiled.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 --no-eager \
    --sync-sites >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"
  sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | sed -n '1,8p;/GPU idle/,$p' \
    | head -32
  timeout 200 python3 bench/decode.py --out "$OUT" --batches 256 --contexts 32768 --no-eager \
    --no-profile >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| 256 \|" ;;
esac
rm -f "$OUT/install.log"
