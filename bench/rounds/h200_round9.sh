#!/usr/bin/env bash
# Device round 9 (one call, ≈ 4 min on a warm cache): the prefill kernels' launch configs.
# Prefill attention variants (bench/attention_prefill.py: float rows as contiguous halves vs
# interleaved, rows/heads/split/stages), the W4A16 expert GEMM's tilings at a 4K chunk
# (bench/moe_decode.py --configs), the GPU checks of the float-row attention (prefill-sized
# launch included), then one 4K prefill end to end with the fastest of each.
source "$(dirname "$0")/../device_setup.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout ${ATTN_TIMEOUT:-100} python3 bench/attention_prefill.py >"$OUT/attention_prefill.log" 2>&1
echo "attention_prefill rc=$?"; grep "^|\|ceiling" "$OUT/attention_prefill.log"
timeout ${MOE_TIMEOUT:-90} python3 bench/moe_decode.py --tokens 64 >"$OUT/moe_decode.log" 2>&1
echo "moe_decode rc=$?"; tail -14 "$OUT/moe_decode.log"
timeout ${GPU_TESTS_TIMEOUT:-60} python3 -m pytest -q -p no:cacheprovider -m gpu -rf \
  tests/gpu/test_attention_side_gpu.py -k "bf16_rows or records" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|rel" "$OUT/gpu_tests.log" | tail -8
ATT=$(python3 bench/pick_fastest.py "$OUT/attention_prefill.log" --prefix float: --strip)
MOE=$(python3 bench/pick_fastest.py "$OUT/moe_decode.log" --prefix "" | grep x || true)
echo "fastest: attention ${ATT:-none}, moe ${MOE:-none}"
timeout ${PREFILL_TIMEOUT:-80} python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 \
  --no-eager --repeats 2 ${ATT:+--attention-config $ATT} ${MOE:+--moe-config $MOE} \
  >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -16
rm -f "$OUT/install.log"
