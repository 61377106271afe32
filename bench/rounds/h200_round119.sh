#!/usr/bin/env bash
# Device round 119 (session 21): where the 4K prefill's host time goes. Round 117a's host
# phases had the backbone enqueued 95 ms after it began (round 102a, session 19: 47 ms) while
# the GPU is busy ~86 ms: the host paces the GPU. This tree's host phases against commit
# a7874f8's (session 19's end; carry ab-base.tar = `git archive a7874f8`) on the same machine,
# interleaved, then this tree's cProfile of one prefill (top 60); and the 16K prompt with
# prefill chunks of 8,192 tokens against 4,096 (≈ 6 min).
source "$(dirname "$0")/../device_setup.sh"
phases() {  # $1: label, $2: log, $3: JSON dir, $4...: more prefill.py flags
  local label=$1 log=$2 dir=$3; shift 3
  timeout 150 python3 bench/prefill.py --no-eager --no-profile --host-phases --out "$dir" "$@" \
    >"$log" 2>&1
  echo "prefill $label rc=$?"; grep -E "^\| (4096|16384) \|" "$log"
  sed -n '/host phases/,+9p' "$log" | grep -E "engram|backbone|result"
}
case "${PART:-a}" in
a)
  ab_base_tree ab-base.tar || exit 1
  mkdir -p /tmp/ab/json
  phases now1 "$OUT/prefill_now1.log" "$OUT" --prompt-lens 4096,16384
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH phases a7874f8 "$OUT/prefill_base.log" /tmp/ab/json \
    --prompt-lens 4096)
  phases now2 "$OUT/prefill_now2.log" /tmp/ab/json --prompt-lens 4096 --host-profile
  sed 's/prefill_chunk_size: 4096/prefill_chunk_size: 8192/' \
    artifacts/topologies/v41-flash-slice-h200.yaml >/tmp/slice-8k.yaml
  grep -q "prefill_chunk_size: 8192" /tmp/slice-8k.yaml || echo "chunk edit failed"
  timeout 120 python3 bench/prefill.py --no-eager --no-profile --prompt-lens 16384 \
    --topology /tmp/slice-8k.yaml --out /tmp/ab/json >"$OUT/prefill_chunk8k.log" 2>&1
  echo "prefill chunk 8192 rc=$?"; grep -E "^\| 16384 \||prefill chunk" "$OUT/prefill_chunk8k.log" ;;
esac
rm -f "$OUT/install.log"
