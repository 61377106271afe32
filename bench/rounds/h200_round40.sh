#!/usr/bin/env bash
# Device round 40 (prepared in session 10, not run: the device time was spent). Carry the
# triton-cache parts (round 35a's). Four calls, each well under the 600 s limit:
#   PART=a (≈ 5 min): the Gluon probes' GPU checks (tests/gpu/test_moe_gluon_gpu.py: both
#     kernels against the fp32 reference, run_experts_w4a8 against Triton's run_experts); the
#     W4A8 kernel at 8 / 16 pairs per program and 3 / 4 TMA stages and the whole W4A8 pipeline
#     beside the Triton kernels (bench/moe_gluon_decode.py); bench/moe_decode.py with the
#     "mxfp4 w4a8 order" variant (decode: the Gluon pipeline; 4096: the folded Triton tiles
#     reading the order) beside word order.
#   PART=b (≈ 4 min): the engine's decode with the W4A8 layout (DI_EXPERT_ORDER=w4a8:
#     ExpertSlots in that order, run_experts routing decode to run_experts_w4a8) at 64 / 256 x
#     4K / 32K with the per-kernel profile — compare with round 36 (word order).
#   PART=c (≈ 4 min): the prefill table with the W4A8 layout (the folded tiles; compare with
#     round 35a) and SAVE_TRITON_CACHE=1.
#   PART=d (≈ 6 min): bench/h200_slice_check.py with the W4A8 layout (16 prompts x 8 tokens):
#     graphs vs eager token for token, and against the reference backend.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 240 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_moe_gluon_gpu.py \
    >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|^\| " "$OUT/gpu_tests.log" | tail -12
  timeout 150 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
    --w4a8-bm 8 16 --w4a8-stages 3 4 >"$OUT/gluon.log" 2>&1
  echo "gluon rc=$?"; grep -E "^\||Error|error|mismatch" "$OUT/gluon.log" | head -40
  timeout 180 python3 bench/moe_decode.py --tokens 64 256 4096 --config-tokens 0 \
    >"$OUT/moe_decode.log" 2>&1
  echo "moe_decode rc=$?"; grep -E "^\|" "$OUT/moe_decode.log" | head -20 ;;
b)
  DI_EXPERT_ORDER=w4a8 timeout 420 python3 bench/decode.py --out "$OUT" --batches 64,256 \
    --contexts 4096,32768 --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 \
    --gap-tokens 32 >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||_moe_gemm|_w4a8|_swiglu|busy|start-up|idle" | head -30 ;;
c)
  export SAVE_TRITON_CACHE=1
  DI_EXPERT_ORDER=w4a8 timeout 420 python3 bench/prefill.py --out "$OUT" --no-eager \
    >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -24 ;;
d)
  DI_EXPERT_ORDER=w4a8 timeout 540 python3 bench/h200_slice_check.py --prompts 16 --tokens 8 \
    --ref-prompts 8 \
    --out "$OUT" >"$OUT/slice_check.log" 2>&1
  echo "slice check rc=$?"; tail -30 "$OUT/slice_check.log" ;;
esac
rm -f "$OUT/install.log"
