#!/usr/bin/env bash
# Device round 94 (session 18): what bounds the persistent Gluon prefill attention — the same
# kernel without row loads (zero-filled slots) and without wgmmas (timing probes, wrong
# values) — and the attention-side GPU checks in full with the Gluon kernel the default.
#   PART=a (≈ 3 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 120 python3 bench/attention_prefill.py \
    --variants float:g:64:64:1:2,float:x:64:64:1:2,float:y:64:64:1:2,float:g:64:64:1:2 \
    >"$OUT/attn.log" 2>&1
  echo "attention bench rc=$?"; tail -5 "$OUT/attn.log"
  timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_attention_side_gpu.py >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -6 ;;
esac
rm -f "$OUT/install.log"
