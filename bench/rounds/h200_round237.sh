#!/usr/bin/env bash
# Device round 237 (session 47, prepared) (≈ 8 min): the defaults with the bf16 twins held
# (twins_topology: on an H200 the slice's `auto` holds them; on an H100 a copy sets them on)
# checked and timed in one call. h200_slice_check.py (8 prompts x 8 tokens, 2 against the
# GPU reference: graphs / eager / static, Triton against the reference — the first slice check
# with linear_ss on the twins), then the lone 4K prompt with families and host phases. On an
# H100 the reference backend's temporaries may not fit beside memory_fraction 0.97 (untried):
# meant for an H200. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
TOPO=$(twins_topology)
echo "topology $TOPO"
timeout 300 python3 bench/h200_slice_check.py --topology "$TOPO" --prompts 8 --tokens 8 \
  --ref-prompts 2 --out "$OUT" >"$OUT/slice_check.log" 2>&1
echo "slice check rc=$?"; tail -12 "$OUT/slice_check.log" | cut -c1-200
timeout 200 python3 bench/prefill.py --topology "$TOPO" --prompt-lens 4096 --repeats 5 \
  --no-eager --host-phases --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"
grep -E "^prefill 4096|GPU busy|^\| 4096|^\| (routed|dense|attention|indexer|rest)|twins|layer [12] enqueue|backbone enqueued" \
  "$OUT/prefill_4k.log" | cut -c1-160 | head -16
rm -f "$OUT/install.log"
