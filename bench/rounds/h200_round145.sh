#!/usr/bin/env bash
# Device round 145 (session 26): after the PIPE loop's removal (rounds 140a / 144: no gain) and
# the reference backend's fp64 transcendentals (row invariance on AVX-512 CPUs): the prefill
# expert GEMM's and the tiny model's GPU checks, then a lone 4K prompt and 8 x 4K in one
# generate with their kernel tables (round 137b: 92.2 ms lone, η 0.239; 8 x 4K η 0.277)
# (≈ 8 min). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 170 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
  tests/gpu/test_moe_gluon_gpu.py tests/gpu/test_model_gpu.py -k "w4a16_prefill or model" \
  >"$OUT/tests.log" 2>&1
echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -6
timeout 330 python3 bench/prefill.py --prompt-lens 4096 --batch-prompts 8 --repeats 3 \
  --no-eager --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" \
  | cut -c1-150 | head -40
rm -f "$OUT/install.log"
