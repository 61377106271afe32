#!/usr/bin/env bash
# Device round 98 (session 19): the prefill attention's chain orders (attention_prefill_gluon
# PIPELINE 1: the next chunk's q . k behind this chunk's p . v; 2: FlashAttention-3's order, the
# next softmax under p . v) — their GPU checks against the reference, their timings beside
# PIPELINE 0 (the first and last variant: the run's noise); and a cProfile of the 4K prefill's
# host work (the worker's enqueue: what the GPU waits for in the early idle gaps).
#   PART=a (≈ 6 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 240 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_attention_side_gpu.py -k "bf16_rows or gl_other" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -6
  timeout 150 python3 bench/attention_prefill.py --variants \
    float:g:64:64:1:2,float:p:64:64:1:2,float:f:64:64:1:2,float:f:32:64:1:4,float:f:32:64:1:3,float:g:64:64:1:2 \
    >"$OUT/attn.log" 2>&1
  echo "attention rc=$?"; grep -E "^\|" "$OUT/attn.log"
  timeout 150 python3 bench/prefill.py --prompt-lens 4096 --no-eager --no-profile --repeats 2 \
    --host-profile --out "$OUT" >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096 \|" "$OUT/prefill.log"
  sed -n '/host profile, worker_enqueue/,+40p' "$OUT/prefill.log" | cut -c1-150 ;;
esac
rm -f "$OUT/install.log"
