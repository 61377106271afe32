#!/usr/bin/env bash
# Device round 47 (session 12): the decode projections with the weight on the MMA's M side
# (kernels/triton/linear_decode.py; now the engine's path for FP8 projections of bf16 x up to
# 256 rows, and linear_quant_act sends every row count there on a GPU). Carry the
# triton-cache parts. Two calls:
#   PART=a (≈ 4 min): GPU checks (linear_decode at 1-256 rows on the slice shapes, the
#     projections that route to it, the shared expert; the W4A8 per-pair checks with the
#     test's w4a8_order fix), then bench/gemm_decode.py: gemm_q8 (the 1-64-row default until
#     now), the row-major bf16 tiles with split-K (65-256 rows until now) and linear_decode
#     tilings, at 1 / 64 / 128 / 256 rows.
#   PART=b (≈ 5 min; after PART=a made BO 64, BK 32, 4 stages, 2 waves linear_decode's one
#     tiling): decode 64 / 256 x 4K / 32K with profiles — compare round 46b (the same code
#     without linear_decode: 64 x 4K 14.35 ms, 256 x 32K 27.84 ms) — then the tilings next to
#     that one (stages 3-8, waves 2-4, BK 64) at 64 / 256 rows.
#   PART=c (≈ 5 min): bench/h200_slice_check.py (16 prompts x 8 tokens): graphs vs eager and
#     against the reference backend with linear_decode and session 11's launch cuts.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf -s \
    tests/gpu/test_gemm_side_gpu.py -k "linear or grouped" tests/gpu/test_shared_expert_gpu.py \
    "tests/gpu/test_moe_gluon_gpu.py::test_w4a8_pipeline_matches_run_experts" \
    "tests/gpu/test_moe_gluon_gpu.py::test_w4a8_prefill_pipeline_matches_run_experts" \
    >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|linear_decode (wq_b|wo_a)" \
    "$OUT/gpu_tests.log" | tail -30
  timeout 300 python3 bench/gemm_decode.py --rows 1 64 128 256 --variants \
"default,bf16:w1,bf16:w2,wm,wm:64x128:4:4:w2,wm:64x64:4:4:w2,wm:64x128:4:4:w4,wm:128x64:3:8:w1,\
wm:128x64:3:8:w2,wm:128x32:4:8:w1,wm:64x32:4:4:w2,wm:128x32:6:8:w2" \
    >"$OUT/gemm_decode.log" 2>&1
  echo "gemm_decode rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode.log" ;;
b)
  timeout 220 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|start-up|idle|fallback|_linear|_gemm_q8|splitk" | head -24
  timeout 200 python3 bench/gemm_decode.py --rows 64 256 --variants \
"wm,wm:64x32:6:4:w2,wm:64x32:4:4:w3,wm:64x32:4:4:w4,wm:64x32:8:4:w2,wm:64x32:3:4:w2,wm:64x64:6:4:w2" \
    >"$OUT/gemm_decode.log" 2>&1
  echo "gemm_decode rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode.log" ;;
c)
  timeout 540 python3 bench/h200_slice_check.py --prompts 16 --tokens 8 --ref-prompts 8 \
    --out "$OUT" >"$OUT/slice_check.log" 2>&1
  echo "slice check rc=$?"; tail -24 "$OUT/slice_check.log" ;;
esac
rm -f "$OUT/install.log"
