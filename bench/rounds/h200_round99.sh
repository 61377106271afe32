#!/usr/bin/env bash
# Device round 99 (session 19): a cProfile of the 4K prefill's host work (Python 3.12 there:
# one profiler sees the worker thread's enqueue too) — what the GPU waits for in the early
# idle gaps.
#   PART=a (≈ 2 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 bench/prefill.py --prompt-lens 4096 --no-eager --no-profile --repeats 2 \
    --host-profile --out "$OUT" >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096 \|" "$OUT/prefill.log"
  sed -n '/host profile, generate/,+80p' "$OUT/prefill.log" | grep -v "^ *$" | cut -c1-160 ;;
esac
rm -f "$OUT/install.log"
