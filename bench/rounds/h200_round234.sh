#!/usr/bin/env bash
# Device round 234 (session 47) (≈ 4 min): where the lone 4K prompt's start goes on the host.
# The prompt on the defaults with the twins held (twins_topology), families (linear_ss now in
# the dense family), the unheld host phases, the host timeline of one prefill behind a 400 ms
# GPU spin (prefill.py --host-timeline-held: every call, launch and torch op up to layer 2 with
# its own time) and the op stacks. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
TOPO=$(twins_topology)
echo "topology $TOPO"
timeout 400 python3 bench/prefill.py --topology "$TOPO" --prompt-lens 4096 --repeats 3 \
  --no-eager --host-phases --host-timeline-held 400 --op-stacks --out "$OUT" \
  >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill 4096|GPU busy|^\| 4096|^\| (routed|dense|attention|indexer|rest)|^host timeline" \
  "$OUT/prefill_4k.log" | cut -c1-200 | head -14
sed -n '/^self time before layer 1/,/^self time of layer 1/p' "$OUT/prefill_4k.log" | head -24
rm -f "$OUT/install.log"
