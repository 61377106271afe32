#!/usr/bin/env bash
# Device round 143 (session 25): where the prefill expert GEMM's warps wait, per SASS
# instruction — Nsight Compute's warp-state sampling (SourceCounters, --page source
# --print-source sass) on the first gated GEMM at 1K and 4K tokens (≈ 2 min). Round 142: the
# kernel without its integer decode is only ~20 % faster, so the ~1 ms per call is the loop's
# skeleton (TMA, waits, wgmmas), not the decode. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
if [ -z "$NCU" ]; then echo "no ncu on this machine"; exit 0; fi
for t in 1024 4096; do
  timeout 150 "$NCU" --clock-control none --profile-from-start off \
    -k regex:_w4a16_prefill_kernel -c 1 --section SourceCounters --section WarpStateStats \
    --page source --print-source sass --csv \
    python3 bench/ncu_probe.py experts-w4a8 --tokens $t >"$OUT/ncu_source_$t.csv" 2>&1
  echo "ncu $t rc=$? lines $(wc -l <"$OUT/ncu_source_$t.csv")"
  head -c 600 "$OUT/ncu_source_$t.csv"; echo
done
xz -T0 -6 "$OUT"/ncu_source_*.csv
rm -f "$OUT/install.log"
