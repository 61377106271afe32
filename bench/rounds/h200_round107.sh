#!/usr/bin/env bash
# Device round 107 (session 19): the shared expert added in the routed experts' combine
# (`moe_routed_experts(residual=)`: one pass, bf16 out, no fp32 (N, D) add and cast) — the
# model's and the expert pipeline's GPU checks, the 4K prefill, decode 64 / 256 x 32K.
#   PART=a (≈ 4 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_model_gpu.py \
    tests/gpu/test_moe_gluon_gpu.py -k "model or tokens or pipeline" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
  timeout 120 python3 bench/prefill.py --prompt-lens 4096 --no-eager --out "$OUT" \
    >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096 \||_moe_combine|CUDAFunctor_a|direct_copy" "$OUT/prefill.log" | head -6
  timeout 150 python3 bench/decode.py --batches 64,256 --contexts 32768 --no-eager \
    --no-profile --out "$OUT" >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| (64|256) \|" ;;
esac
rm -f "$OUT/install.log"
