#!/usr/bin/env bash
# Device round 90 (session 18): the prefill attention in Gluon (attention_prefill_gluon) — its
# GPU checks against the reference and the Triton kernel, the one-layer bench against the Triton
# launch, and the 4K prefill with it (profiled: the kernel breakdown).
#   PART=a (≈ 6 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf -q -s \
    tests/gpu/test_attention_side_gpu.py -k "bf16_rows or gl_other" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error|rows N=|prefill_gl" \
    "$OUT/tests.log" | tail -14
  timeout 120 python3 bench/attention_prefill.py --variants float:h:32:64:1:2,float:g:64:64:1:2 \
    >"$OUT/attn.log" 2>&1
  echo "attention bench rc=$?"; tail -4 "$OUT/attn.log"
  timeout 200 python3 bench/prefill.py --prompt-lens 4096 --no-eager --out "$OUT" \
    >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096|_attn|_w4a16|_linear_wide" "$OUT/prefill.log" ;;
esac
rm -f "$OUT/install.log"
