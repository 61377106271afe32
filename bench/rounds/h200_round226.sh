#!/usr/bin/env bash
# Device round 226 (session 46) (≈ 5 min): bench/wgmma_rate.py complete (round 225's stopped
# at N 32 + 16: a wait per step cannot carry a second accumulator through _mma_group — those
# rows are skipped now), then the lone 4K prompt's host phases and host profile on the
# current defaults (bench/prefill.py --host-phases: where the host is against the GPU layer by
# layer; session 41's round 203 was the last such run). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 bench/wgmma_rate.py >"$OUT/wgmma_rate.log" 2>&1
echo "wgmma_rate rc=$?"; grep -E "^\||ceiling" "$OUT/wgmma_rate.log" | cut -c1-120
timeout 240 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --no-profile \
  --host-phases --host-profile --sync-sites --out /tmp/j >"$OUT/prefill_host.log" 2>&1
echo "host rc=$?"; grep -E "^prefill 4096|enqueue|collected" "$OUT/prefill_host.log" | head -20
rm -f "$OUT/install.log"
