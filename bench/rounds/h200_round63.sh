#!/usr/bin/env bash
# Device round 63 (session 14): the mHC coefficients at decode sizes. Round 57b moved the
# 256-token calls to the prefill launch (BM 64, bf16x3): coefficients 850 -> 334 µs per step,
# but the finalize ran at the coefficients' BM (4 programs) 122 -> 553 µs. The finalize now
# has its own token block (mhc.COEFFS_FINALIZE_BLOCK_M = 16).
# Carry the triton-cache parts.
#   PART=a (≈ 4 min): bench/mhc_prefill.py at 64 / 128 / 256 tokens over the launches (finalize
#     at BM 16 for all), then decode 64 / 256 x 4K with every call on the prefill launch
#     (--mhc-decode-max-tokens ${MHC_MAX:-32}) and the kernel profile of both: compare
#     `_hc_coeffs_kernel` + `_hc_finalize_kernel` with round 60 (64 x 4K: 277.5 + 120.3 µs;
#     256: 848.0 + 121.5).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 100 python3 bench/mhc_prefill.py --tokens 64 128 256 --variants \
"default,16:64:4:4:528:tf32x3,64:64:4:4:528:bf16x3:3,32:64:4:4:528:bf16x3:3,\
128:64:8:4:528:bf16x3:3,64:64:4:4:264:bf16x3:3,64:64:4:4:1056:bf16x3:3" \
    >"$OUT/mhc.log" 2>&1
  echo "mhc_prefill rc=$?"; grep -E "^\|" "$OUT/mhc.log" | head -30
  timeout 260 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 \
    --no-eager --profile-points 64x4096,256x4096 --gap-prompts 16 --gap-tokens 32 \
    --mhc-decode-max-tokens "${MHC_MAX:-32}" >"$OUT/decode.log" 2>&1
  echo "decode (--mhc-decode-max-tokens ${MHC_MAX:-32}) rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_hc_|_w4a8|_linear|target" | head -24 ;;
esac
rm -f "$OUT/install.log"
