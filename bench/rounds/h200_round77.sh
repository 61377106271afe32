#!/usr/bin/env bash
# Device round 77 (session 16): session 16's final defaults — the Gluon paged index scores
# (`indexer.PAGED_KERNEL = "gl"`), the bf16 prefill experts with quarter fills (PARTS 4), the
# token gather with a loop over K.
#   PART=a (≈ 5 min): bench/h200_slice_check.py, 8 prompts x 8 tokens, 2 against the GPU
#     reference (graphs vs eager vs static; Triton vs the reference, divergences explained by
#     logit margins); then the radix top-k (0.59 ms of the 256 x 32K step, 4 calls) at the
#     decode graph's rows: 256 rows, 32,768 / 16,384 visible of 65,536 / 32,768 (ratios 1 /
#     2), tiles of 4,096 - 16,384 scores and 8 / 16 / 32 warps.
#   PART=b (≈ 5 min): decode 64 / 128 / 256 x 4K / 32K (profiled at 256 x 32K) with start-up
#     from the carried Triton cache (round 75b's), saving the cache.
[ "${PART:-a}" = b ] && export SAVE_TRITON_CACHE=1  # read when device_setup.sh is sourced
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 270 python3 bench/h200_slice_check.py --prompts 8 --tokens 8 --ref-prompts 2 \
    --out "$OUT" >"$OUT/slice_check.log" 2>&1
  echo "slice check rc=$?"; tail -12 "$OUT/slice_check.log"
  for R in 1 2; do
    timeout 100 python3 bench/topk_decode.py --rows 256 --entries $((32768 / R)) \
      --width $((65536 / R)) --variants 8:4096:8,8:4096:16,8:8192:16,8:16384:16,8:16384:32,4:4096:8 \
      >"$OUT/topk_r$R.log" 2>&1
    echo "topk ratio $R rc=$?"; grep -E "^\| [0-9]" "$OUT/topk_r$R.log"
  done ;;
b)
  timeout 420 python3 bench/decode.py --out "$OUT" --batches 64,128,256 --contexts 4096,32768 \
    --no-eager --profile-points 256x32768 --gap-prompts 16 --gap-tokens 32 \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|128|256) \||busy|_index|_radix|start-up|idle|target" | head -20 ;;
esac
rm -f "$OUT/install.log"
