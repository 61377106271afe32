#!/usr/bin/env bash
# Device round 95 (session 18): the persistent Gluon prefill attention with each math warpgroup
# a partition of its own (SPLIT_O: the whole S in each, q . k twice, half of O each, no barrier
# between them) against the shipped one (both warpgroups in one partition), at BK 64 x 2 and
# 32 x 4; the GPU checks of both.
#   PART=a (≈ 3 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q -s \
    tests/gpu/test_attention_side_gpu.py -k "gl_other" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error|s=True" \
    "$OUT/tests.log" | tail -8
  timeout 120 python3 bench/attention_prefill.py \
    --variants float:g:64:64:1:2,float:s:64:64:1:2,float:s:32:64:1:4,float:g:64:64:1:2 \
    >"$OUT/attn.log" 2>&1
  echo "attention bench rc=$?"; tail -5 "$OUT/attn.log" ;;
esac
rm -f "$OUT/install.log"
