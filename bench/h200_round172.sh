#!/usr/bin/env bash
# Device round 172 (session 33; after round 171) (≈ 5 min): the lone 4K prompt with session 33's
# prepared launches, base (all off) / new (all on) interleaved twice, then each alone once:
# the persistent linear_wide for 256-row tiles (--linear-wide-persistent-rows 1024), its
# 16-byte stores on the base kernel (--linear-wide-vec-store-rows 1024), the prefill expert
# GEMMs' 16-byte stores (--w4a16-vec-store 1). Make a default only what wins end to end (and
# passed round 171's checks). Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
OFF=(--linear-wide-persistent-rows 0 --linear-wide-vec-store-rows 0 --w4a16-vec-store 0)
ON=(--linear-wide-persistent-rows 1024 --linear-wide-vec-store-rows 1024 --w4a16-vec-store 1)
prefill_ab() {  # $1: label; the rest: prefill.py flags
  local label=$1 log; shift
  log="$OUT/prefill_$label.log"
  timeout 110 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager "$@" \
    --out /tmp/j >"$log" 2>&1
  echo "$label rc=$?"; grep -E "^prefill [0-9]" "$log"
  grep -E "^\| (dense|routed)" "$log" | cut -c1-100 | head -2
}
for i in 1 2; do
  prefill_ab "base_$i" "${OFF[@]}"
  prefill_ab "new_$i" "${ON[@]}"
done
prefill_ab persistent --no-profile --linear-wide-persistent-rows 1024 \
  --linear-wide-vec-store-rows 0 --w4a16-vec-store 0
prefill_ab wide_vec --no-profile --linear-wide-persistent-rows 0 \
  --linear-wide-vec-store-rows 1024 --w4a16-vec-store 0
prefill_ab expert_vec --no-profile --linear-wide-persistent-rows 0 \
  --linear-wide-vec-store-rows 0 --w4a16-vec-store 1
rm -f "$OUT/install.log"
