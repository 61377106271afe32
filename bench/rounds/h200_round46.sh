#!/usr/bin/env bash
# Device round 46 (prepared in session 11, not run: device time spent). Carry the triton-cache
# parts (round 44's, in the repo root). Three calls:
#   PART=a (≈ 3 min): the Gluon GPU checks (decode; prefill with the EXPANDED kernel: token
#     scales pre-expanded into int32 exponents in the accumulator's column order, 311 instead
#     of 390 instructions per K step per thread in the sm_90 SASS, 126 registers; the
#     pipelines' per-pair outputs), then bench/moe_gluon_prefill.py with and without EXPANDED
#     at 4K / 16K tokens, 32 / 64 pairs per program. If EXPANDED wins, make it
#     run_experts_w4a8_prefill's default.
#   PART=b (≈ 3 min): decode 64 / 256 x 4K / 32K with profiles after session 11's CPU-only
#     launch cuts (the fused cache-write ops in the decode step, window rows once per step:
#     747 -> 215 model-code torch ops per decode step of the tiny model) — compare round 45
#     (64 x 4K 15.39 ms, 64 x 32K 15.81 ms), then the prefill table.
#   PART=c (≈ 5 min): bench/h200_slice_check.py (16 prompts x 8 tokens): graphs vs eager and
#     against the reference backend with those changes.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_moe_gluon_gpu.py \
    >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|prefill|pipeline" "$OUT/gpu_tests.log" \
    | tail -24
  timeout 240 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 64 --stages 3 \
    --warpgroups 1 --expanded 0 1 >"$OUT/prefill_gemm.log" 2>&1
  echo "prefill gemm rc=$?"; grep -E "^\||Error|error" "$OUT/prefill_gemm.log" | head -30 ;;
b)
  timeout 220 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|start-up|idle|fallback" | head -14
  timeout 200 python3 bench/prefill.py --out "$OUT" --no-eager >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -12 ;;
c)
  timeout 540 python3 bench/h200_slice_check.py --prompts 16 --tokens 8 --ref-prompts 8 \
    --out "$OUT" >"$OUT/slice_check.log" 2>&1
  echo "slice check rc=$?"; tail -24 "$OUT/slice_check.log" ;;
esac
rm -f "$OUT/install.log"
