#!/usr/bin/env bash
# Device round 87 (session 17): decode after the fused mHC coefficients tile (round 86's decode
# call had a bad argument), the mHC GPU check with both launches' precision patched, and the
# 4K prefill's host phases (where round 86's 2.2 ms host gap before the first gather sits).
#   PART=a (≈ 5 min): mHC GPU check, decode 64 / 256 x 4K / 32K, the 4K prefill (host phases).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 60 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_gemm_side_gpu.py \
    -k "mhc" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "$OUT/tests.log" | tail -4
  timeout 170 python3 bench/decode.py --batches 64,256 --contexts 4096,32768 --no-eager \
    --no-profile --out "$OUT" >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| (64|256) \|"
  timeout 100 python3 bench/prefill.py --prompt-lens 4096 --no-eager --no-profile \
    --host-phases --repeats 2 >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096" "$OUT/prefill.log"; sed -n '/host phases/,+10p' \
    "$OUT/prefill.log" ;;
esac
rm -f "$OUT/install.log"
