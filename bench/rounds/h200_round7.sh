#!/usr/bin/env bash
# Device round 7 (one call, ≈ 6 min on a warm Triton cache; priorities first): every GPU kernel
# and engine check (tests/gpu), the routed-expert kernel alone (bench/moe_decode.py), decode at
# batch 1/64/256 @ 4K with the b=64 kernel profile and the engine loop's idle gaps, one 4K
# prefill with its kernel profile, then the prefill attention's row-chunk variants.
source "$(dirname "$0")/../device_setup.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout ${GPU_TESTS_TIMEOUT:-120} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu \
  -rf >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -12
timeout ${MOE_TIMEOUT:-50} python3 bench/moe_decode.py >"$OUT/moe_decode.log" 2>&1
echo "moe_decode rc=$?"; tail -16 "$OUT/moe_decode.log"
timeout ${DECODE_TIMEOUT:-110} python3 bench/decode.py --out "$OUT" --batches 1,64,256 \
  --contexts 4096 --no-eager --profile-points 64x4096 >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -30
timeout ${PREFILL_TIMEOUT:-45} python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 \
  --no-eager --repeats 2 >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -16
timeout ${ATTN_TIMEOUT:-40} python3 bench/attention_prefill.py >"$OUT/attention_prefill.log" 2>&1
echo "attention_prefill rc=$?"; tail -6 "$OUT/attention_prefill.log"
rm -f "$OUT/install.log"
