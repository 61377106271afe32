#!/usr/bin/env bash
# Device round 204 (session 41) (≈ 4 min): what a kernel boundary costs and how much
# programmatic dependent launch hides (bench/pdl_probe.py: chains of one small kernel behind a
# spin, PDL off / on), then the lone 4K prompt's profile with its idle gaps split by when they
# ended (the host-paced start against the rest: prefill.py's "idle gaps by when they ended").
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 120 python3 bench/pdl_probe.py --launches 400 --sizes-mb 2,16,64 >"$OUT/pdl.log" 2>&1
echo "pdl rc=$?"; cat "$OUT/pdl.log" | tail -16
timeout 200 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --out "$OUT" \
  >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill 4096|GPU busy" "$OUT/prefill_4k.log"
sed -n '/idle gaps by when/,/^$/p' "$OUT/prefill_4k.log" | head -8
rm -f "$OUT/install.log"
