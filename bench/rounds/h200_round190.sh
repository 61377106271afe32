#!/usr/bin/env bash
# Device round 190 (session 38, for the next session) (≈ 5 min): the lone 4K prompt at session
# 38's final defaults (the quantizer without its software rounding end to end: families,
# kernel table), decode 64 / 256 x 4K (the decode step's mHC sites and Q8_32 quantizers
# changed in session 38), and hc_coeffs at BM 128 (8 warps) against BM 64 — alone
# (mhc_prefill.py) and end to end (prefill_ab.py; the same bits expected: the split is fixed).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --out "$OUT" \
  >"$OUT/prefill_4k.log" 2>&1
echo "prefill 4K rc=$?"
grep -E "^prefill 4096|GPU busy|^\| 4096|^\| (routed|dense|attention|indexer|rest)|_hc_expand_collapse|_rms_apply|_swiglu_slots|_quant_q8_32|_hc_coeffs" \
  "$OUT/prefill_4k.log" | cut -c1-150 | head -24
timeout 150 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 --no-eager \
  --no-profile >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -9
timeout 60 python3 bench/mhc_prefill.py --tokens 4096 \
  --variants "default,128:64:8:4:528:bf16x3:3,default,128:64:8:4:528:bf16x3:3" \
  >"$OUT/mhc.log" 2>&1
echo "mhc_prefill rc=$?"; grep -E "^\| 4096" "$OUT/mhc.log"
prefill_ab_4k 4 \
  "bm64=--launch-constant mhc.COEFFS_BLOCK_M_PREFILL=64 --launch-constant mhc.COEFFS_NUM_WARPS_PREFILL=4" \
  "bm128=--launch-constant mhc.COEFFS_BLOCK_M_PREFILL=128 --launch-constant mhc.COEFFS_NUM_WARPS_PREFILL=8"
rm -f "$OUT/install.log"
