#!/usr/bin/env bash
# Device round 203 (session 41) (≈ 6 min): session 40's shared expert packing end to end on this
# card (prefill_ab: packed against apart, interleaved; the check tokens should be equal), then
# one lone 4K prompt's host work: phases, cProfile of generate and the worker's enqueue, host
# syncs by site (what the GPU waits for in its early idle gaps). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
prefill_ab_4k 3 "apart=--launch-constant shared_expert.PACKED_MIN_ROWS=1000000" \
  "packed=--launch-constant shared_expert.PACKED_MIN_ROWS=1024"
timeout 150 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --no-profile \
  --host-phases --host-profile --sync-sites --out /tmp/j >"$OUT/prefill_host.log" 2>&1
echo "host rc=$?"; grep -E "^prefill 4096" "$OUT/prefill_host.log"
rm -f "$OUT/install.log"
