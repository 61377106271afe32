#!/usr/bin/env bash
# Device round 126 (session 22): the 4K prefill's host enqueue with the Gluon layouts cached
# (functools.cache) against commit 46b0c66 (carry ab-base.tar = `git archive 46b0c66`) on the
# same machine, interleaved; then this tree's cProfile of one prefill (top 60) and the kernel
# profile with the GPU idle by the launch that ended it (≈ 5 min).
source "$(dirname "$0")/../device_setup.sh"
phases() {  # $1: label, $2: log, $3: JSON dir, $4...: more prefill.py flags
  local label=$1 log=$2 dir=$3; shift 3
  timeout 150 python3 bench/prefill.py --no-eager --host-phases --out "$dir" "$@" \
    >"$log" 2>&1
  echo "prefill $label rc=$?"; grep -E "^\| 4096 \|" "$log"
  sed -n '/host phases/,+9p' "$log" | grep -E "engram|backbone|result"
}
case "${PART:-a}" in
a)
  ab_base_tree ab-base.tar || exit 1
  mkdir -p /tmp/ab/json
  phases now1 "$OUT/prefill_now1.log" "$OUT" --prompt-lens 4096 --no-profile
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH phases 46b0c66 "$OUT/prefill_base1.log" \
    /tmp/ab/json --prompt-lens 4096 --no-profile)
  phases now2 "$OUT/prefill_now2.log" /tmp/ab/json --prompt-lens 4096 --no-profile
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH phases 46b0c66 "$OUT/prefill_base2.log" \
    /tmp/ab/json --prompt-lens 4096 --no-profile)
  phases now3 "$OUT/prefill_now3.log" /tmp/ab/json --prompt-lens 4096 --host-profile
  sed -n '/GPU idle/,+14p' "$OUT/prefill_now3.log" | cut -c1-150 ;;
esac
rm -f "$OUT/install.log"
