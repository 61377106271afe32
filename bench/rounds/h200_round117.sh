#!/usr/bin/env bash
# Device round 117 (session 21): session 21's baseline with the paired down launch as the
# default — the model's GPU checks (the engine's decode path on it), decode 64 / 256 x 32K
# with the kernel profile of 256 x 32K (where the step's time goes now), the 4K prefill with
# its profile and host phases (≈ 6 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_model_gpu.py >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
  timeout 200 python3 bench/decode.py --batches 64,256 --contexts 32768 --no-eager \
    --profile-points 256x32768 --out "$OUT" >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| (64|256) \|"
  grep -A 24 "kernels of" "$OUT/decode.log" | head -30
  timeout 150 python3 bench/prefill.py --prompt-lens 4096 --no-eager --host-phases \
    --out "$OUT" >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096 \|" "$OUT/prefill.log"
  grep -A 22 "kernels of" "$OUT/prefill.log" | head -24
  sed -n '/host phases/,+9p' "$OUT/prefill.log" ;;
esac
rm -f "$OUT/install.log"
