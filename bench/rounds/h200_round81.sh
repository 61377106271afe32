#!/usr/bin/env bash
# Device round 81 (session 17): what bounds the prefill expert GEMM — its PTX edited before
# ptxas (bench/w4a16_probe.py): a larger register budget, the decode without half-precision
# FMAs (wrong values: a timing bound), the membar pass's extra bar.syncs in the K loop removed.
#   PART=a (≈ 4 min): the probe sets at 4,096 tokens.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 400 python3 bench/w4a16_probe.py --probe base maxnreg xor xor,maxnreg nobar \
    xor,maxnreg,nobar >"$OUT/probe.log" 2>&1
  echo "probe rc=$?"; cat "$OUT/probe.log" | tail -40 ;;
esac
rm -f "$OUT/install.log"
