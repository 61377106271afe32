#!/usr/bin/env bash
# Device round 11 (one call, ≈ 6 min on a warm cache; priorities first): the session-5 kernel
# changes not yet measured — the indexer's float-key layout and tiling (bench/index_prefill.py),
# the mHC coefficients' split-K target (bench/mhc_prefill.py), the dense FP8 GEMMs' tilings and
# a bf16-weight form (bench/gemm_prefill.py), the W4A16 expert kernel's decode tilings at 64
# tokens incl. the swapped-operand (SWAP_AB) tiles (bench/moe_decode.py --config-tokens 64) —
# then the changed kernels' GPU checks, one 4K prefill (the new defaults), and decode at batch
# 64 / 4K with its profile under the sweep's fastest decode expert tiling (kernel_overrides.py:
# not yet a default).
source "$(dirname "$0")/device_setup.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for b in index_prefill mhc_prefill gemm_prefill; do
  timeout ${SWEEP_TIMEOUT:-60} python3 bench/$b.py >"$OUT/$b.log" 2>&1
  echo "$b rc=$?"; grep "^|\|ceiling" "$OUT/$b.log"
done
timeout ${MOE_TIMEOUT:-60} python3 bench/moe_decode.py --tokens 64 --config-tokens 64 \
  >"$OUT/moe_decode.log" 2>&1
echo "moe_decode rc=$?"; tail -12 "$OUT/moe_decode.log"
timeout ${GPU_TESTS_TIMEOUT:-90} python3 -m pytest -q -p no:cacheprovider -m gpu -rf \
  tests/gpu/test_attention_side_gpu.py tests/gpu/test_gemm_side_gpu.py \
  -k "index_scores or mhc or bf16_rows or accuracy" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -6
timeout ${PREFILL_TIMEOUT:-70} python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 \
  --no-eager --repeats 2 >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -16
MOE=$(python3 bench/pick_fastest.py "$OUT/moe_decode.log" | grep x || true)
echo "fastest decode expert tiling: ${MOE:-none}"
timeout ${DECODE_TIMEOUT:-90} python3 bench/decode.py --out "$OUT" --batches 64 \
  --contexts 4096 --no-eager --profile-points 64x4096 ${MOE:+--moe-config $MOE} \
  >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -24
rm -f "$OUT/install.log"
