#!/usr/bin/env bash
# Device round 66 (session 14): linear_wide's split-K fix-up (the last program of a tile sums
# the partials: no second launch; round 65b: 59 `_splitk_sum_t_kernel` launches, 0.20 ms per
# 256 x 32K step, plus their gaps) and the decode table at the session's defaults (linear_wide
# from 64 rows, the mHC prefill launch above 128 tokens).
# Ran at commit 459756a: the fix-up is bit-identical but 2.4x slower (the seven shapes 411.6 vs
# 173.2 µs at 256 rows: only the last program of each tile sums, and the split shapes are the
# few-tile ones), decode 256 x 32K 27.0 ms; removed again (the kernel is 459756a's parent's).
# Carry the triton-cache parts.
#   PART=a (≈ 6 min): linear_wide's GPU checks (incl. the fix-up's bit identity with the second
#     launch), bench/gemm_decode.py at 256 / 64 rows (gl vs gl-nofix vs wm), then decode 64 /
#     256 x 4K / 32K with profiles (saves the Triton cache).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -s -x \
    tests/gpu/test_linear_wide_gpu.py >"$OUT/wide_tests.log" 2>&1
  echo "linear_wide GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" \
    "$OUT/wide_tests.log" | tail -6; grep -E "^\| linear_(wide fixup|quant)" "$OUT/wide_tests.log" | head -12
  for R in 256 64; do
    timeout 90 python3 bench/gemm_decode.py --rows $R --variants "wm,gl,gl-nofix" \
      >"$OUT/gemm_decode$R.log" 2>&1
    echo "gemm_decode $R rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_decode$R.log" | grep -E "^\| [0-9]"
  done
  timeout 260 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_linear|_hc_|_w4a8|_splitk|start-up|idle|target" | head -30 ;;
esac
rm -f "$OUT/install.log"
