#!/usr/bin/env bash
# Device round 92 (session 18): (1) the Gluon prefill attention's chunk rows / ring slots
# (BK 64 x 2 against BK 32 x 3 and x 4: more chunks in flight, narrower q . k); (2) what the
# prefill expert GEMM loses to its weight decode: the kernel with the decode PTX replaced by
# moves (wrong values: a timing bound; untracked copies under bench/_old/, carried over).
#   PART=a (≈ 5 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 120 python3 bench/attention_prefill.py \
    --variants float:g:64:64:1:2,float:g:32:64:1:3,float:g:32:64:1:4,float:g:64:64:1:2 \
    >"$OUT/attn.log" 2>&1
  echo "attention bench rc=$?"; tail -5 "$OUT/attn.log"
  timeout 300 python3 bench/w4a16_probe.py --module package bench/_old/w4a16_nodecode.py \
    bench/_old/w4a16_noscale.py >"$OUT/probe.log" 2>&1
  echo "probe rc=$?"; tail -8 "$OUT/probe.log" ;;
esac
rm -f "$OUT/install.log"
