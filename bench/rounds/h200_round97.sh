#!/usr/bin/env bash
# Device round 97 (session 18): the engram hash ids built on demand at the first engram layer
# (the host prepares them while the GPU runs block 0): the model's GPU check, the 4K prefill
# (profiled: the GPU idle before the first kernels; host phases).
#   PART=a (≈ 2.5 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 100 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_model_gpu.py \
    >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
  timeout 120 python3 bench/prefill.py --prompt-lens 4096 --no-eager --host-phases \
    --out "$OUT" >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096 \|" "$OUT/prefill.log"
  sed -n '/GPU idle/,/^$/p' "$OUT/prefill.log" | head -5
  sed -n '/host phases/,+9p' "$OUT/prefill.log" ;;
esac
rm -f "$OUT/install.log"
