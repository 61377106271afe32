#!/usr/bin/env bash
# Device round 96 (session 18): the end-of-session figures at the final defaults — the GPU
# checks of the prefill attention and the model, the 4K and 16K prefill (the 4K profiled:
# kernel breakdown, GPU idle, host phases), decode at 64 / 256 x 4K / 32K.
#   PART=a (≈ 7 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_attention_side_gpu.py tests/gpu/test_model_gpu.py \
    -k "bf16_rows or gl_other or model" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
  timeout 170 python3 bench/prefill.py --prompt-lens 4096,16384 --no-eager --host-phases \
    --out "$OUT" >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| (4096|16384) \||_attn|_w4a16|_linear_wide" "$OUT/prefill.log"
  sed -n '/host phases/,+9p' "$OUT/prefill.log"
  timeout 170 python3 bench/decode.py --batches 64,256 --contexts 4096,32768 --no-eager \
    --no-profile --out "$OUT" >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| (64|256) \|" ;;
esac
rm -f "$OUT/install.log"
