#!/usr/bin/env bash
# Device round 78 (session 16): where the eager 4K prefill's host gaps come from (~6.5 ms of
# 110 ms unprofiled, round 76b): bench/prefill.py --sync-sites (torch's CUDA sync debug mode,
# each synchronizing op's call site in the package, bench/host_syncs.py).
#   PART=a (≈ 2 min): the 4K prefill, unprofiled, then one more under the sync debug mode.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 240 python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 --no-eager --no-profile \
    --sync-sites >"$OUT/prefill_syncs.log" 2>&1
  echo "prefill --sync-sites rc=$?"
  sed -n '/^## prefill/,$p' "$OUT/prefill_syncs.log" | grep -v "^USDT" | head -24 ;;
esac
rm -f "$OUT/install.log"
