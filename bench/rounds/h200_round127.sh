#!/usr/bin/env bash
# Device round 127 (session 22): the GPU check of batch-invariant prefill rows
# (tests/gpu/test_batch_invariance_gpu.py), then the 4K prefill's kernel profile with 40 rows
# and the rest summed (which small kernels the other ~17 ms are), then decode 64 / 256 x 32K
# with the 256 x 32K profile (25 rows + the rest) at this session's code (≈ 6 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_batch_invariance_gpu.py >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -6
  timeout 150 python3 bench/prefill.py --prompt-lens 4096 --no-eager --out "$OUT" \
    >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096 \|" "$OUT/prefill.log"
  grep -A 44 "kernels of" "$OUT/prefill.log" | head -46 | cut -c1-120
  timeout 220 python3 bench/decode.py --batches 64,256 --contexts 32768 --no-eager \
    --profile-points 256x32768 --out "$OUT" >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| (64|256) \|"
  grep -A 29 "kernels at" "$OUT/decode.log" | head -31 | cut -c1-120 ;;
esac
rm -f "$OUT/install.log"
