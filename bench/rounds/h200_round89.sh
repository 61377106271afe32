#!/usr/bin/env bash
# Device round 89 (session 18): the prefill expert GEMM with more weight rows per token tile —
# 4 warpgroups (BO 256: half the token tile's L2 reads per FLOP, one program of 512 threads
# per SM) against the shipped 2, at BM 128 and 64, and a deeper token ring at 4 warpgroups.
#   PART=a (≈ 5 min): bench/w4a16_probe.py at 4,096 and 16,384 tokens.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 330 python3 bench/w4a16_probe.py --sets - WARPGROUPS=4 WARPGROUPS=4,STAGES=3 \
    WARPGROUPS=4,BLOCK_M=64 BLOCK_M=64 >"$OUT/probe4k.log" 2>&1
  echo "probe 4K rc=$?"; tail -14 "$OUT/probe4k.log"
  timeout 200 python3 bench/w4a16_probe.py --tokens 16384 --sets - WARPGROUPS=4 \
    >"$OUT/probe16k.log" 2>&1
  echo "probe 16K rc=$?"; tail -8 "$OUT/probe16k.log" ;;
esac
rm -f "$OUT/install.log"
