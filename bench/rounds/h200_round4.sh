#!/usr/bin/env bash
# Device round 4 (issue 7): decode and prefill against the roofline on the v41-flash-slice-h200
# plan (bench/decode.py, bench/prefill.py). Results (<date>-h200-decode.json, -prefill.json,
# or their .partial.json after a timeout) and logs land in $OUT; the tables are printed last.
# Whole round < 560 s: install (~1 min on 2 cores) + DECODE_TIMEOUT 330 + PREFILL_TIMEOUT 170.
# DEEPINFER_COMMIT records the commit where the copy has no .git; DECODE_ARGS="--graph-buckets
# plan" measures start-up with every plan bucket (on a cold Triton cache it may not fit).
source "$(dirname "$0")/../device_setup.sh"
nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv,noheader
timeout ${DECODE_TIMEOUT:-330} python3 bench/decode.py --out "$OUT" ${DECODE_ARGS:-} \
  >"$OUT/decode.log" 2>&1
decode_rc=$?
timeout ${PREFILL_TIMEOUT:-170} python3 bench/prefill.py --out "$OUT" ${PREFILL_ARGS:-} \
  >"$OUT/prefill.log" 2>&1
prefill_rc=$?
for name in decode prefill; do
  echo "=== $name.log"
  if grep -q "^## $name" "$OUT/$name.log"; then
    sed -n "/^## $name/,\$p" "$OUT/$name.log"
  else  # timed out or failed: the log's end, then the tables of the partial results if any
    grep -v "^USDT" "$OUT/$name.log" | tail -25
    for partial in "$OUT"/*-"$name".partial.json; do
      [ -f "$partial" ] && python3 bench/$name.py --report "$partial"
    done
  fi
done
ls "$OUT"
echo "decode rc=$decode_rc prefill rc=$prefill_rc"
