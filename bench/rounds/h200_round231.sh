#!/usr/bin/env bash
# Device round 231 (session 46) (≈ 8 min): the prefill bf16 twins end to end. GPU tests of
# linear_ss with the linear dispatch (the twin taken from linear.SS_MIN_ROWS rows, the same
# bits); then the lone 4K prompt, prefill_ab, twins held (the slice topology with
# cache.prefill_bf16_weights: on and memory_fraction 0.97 — on an H100 the slice leaves auto
# too little room), linear_ss on (SS_MIN_ROWS 1024) against off (0: linear_wide, as before),
# 2 rounds, the check tokens compared. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -q -m gpu -s -p no:cacheprovider tests/gpu/test_linear_ss_gpu.py \
  >"$OUT/gpu_linear_ss.log" 2>&1
echo "gpu tests rc=$?"; tail -3 "$OUT/gpu_linear_ss.log" | cut -c1-200
TOPO=$(twins_topology)  # (inline when it ran: on + 0.97 on any card)
echo "topology $TOPO"
timeout 400 python3 bench/prefill_ab.py --topology "$TOPO" --prompt-len 4096 --rounds 2 \
  --repeats 3 --variant "ss=--launch-constant linear.SS_MIN_ROWS=1024" \
  --variant "wide=--launch-constant linear.SS_MIN_ROWS=0" --out "$OUT" >"$OUT/prefill_ab.log" 2>&1
echo "prefill_ab rc=$?"; grep -E "^\| [a-z0-9]+ \| [0-9]|median|same|differ|tokens|twin|Error" \
  "$OUT/prefill_ab.log" | cut -c1-160 | tail -24
rm -f "$OUT/install.log"
