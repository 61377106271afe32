#!/usr/bin/env bash
# Device round 35: mHC coefficients as bf16 MMAs over a three-way bf16 split of fn (bf16x3) and
# 64-token blocks at prefill (kernels/triton/mhc.py) — PART=a: the mHC GPU checks (bf16x3 and
# tf32x3 against the reference), bench/mhc_prefill.py (old launch vs new, 4096 and 64 tokens),
# then the prefill table (SAVE_TRITON_CACHE=1: the new kernels are not in the carried cache);
# PART=b: the decode table (carry part a's cache).
source "$(dirname "$0")/../device_setup.sh"
if [ "${PART:-a}" = a ]; then
  timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu/test_gemm_side_gpu.py \
    -k mhc >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|hc_" "$OUT/gpu_tests.log" | tail -12
  timeout 120 python3 bench/mhc_prefill.py --tokens 4096 64 >"$OUT/mhc.log" 2>&1
  echo "mhc rc=$?"; grep -E "^\|" "$OUT/mhc.log" | head -16
  timeout ${PREFILL_TIMEOUT:-240} python3 bench/prefill.py --out "$OUT" --no-eager \
    >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -30
fi
if [ "${PART:-a}" = b ]; then
  timeout ${DECODE_TIMEOUT:-420} python3 bench/decode.py --out "$OUT" --no-eager \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -60
fi
rm -f "$OUT/install.log"
