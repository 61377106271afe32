#!/usr/bin/env bash
# Device round 45 (session 11): the shared expert on the dense projection kernels
# (kernels/triton/shared_expert.py) — the GPU check against the reference and the grouped
# path, then decode at 64 / 256 x 4K / 32K with profiles (compare round 44: 1.31 ms of
# _moe_gemm_kernel per step at 64 x 4K). Carry round 44's triton-cache parts.
source "$(dirname "$0")/../device_setup.sh"
timeout 90 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_shared_expert_gpu.py \
  >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|shared" "$OUT/gpu_tests.log" | tail -6
timeout 200 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
  --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
  | grep -E "^\| (64|256) \||_w4a8|_moe_gemm|_gemm_q8|_linear_kernel|_swiglu|busy|start-up|idle" \
  | head -24
rm -f "$OUT/install.log"
