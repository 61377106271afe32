#!/usr/bin/env bash
# Device round 106 (session 19): the W4A8 decode expert GEMM with two K steps per weight TMA box
# ([64 rows, 128 bytes]: each row's 128 contiguous bytes in one request, half the TMA issues;
# moe_gluon_w4a8.DECODE_TMA_STEPS = 2) — its GPU checks, the GEMMs alone at 64 / 256 tokens
# beside the shipped boxes, and decode 64 / 256 x 32K both ways (the experts are ~16 of the
# ~24 ms of a 256 x 32K step at ~0.80 of their bytes).
#   PART=a (≈ 5 min). Ran at commit da04d7e; the two-step boxes were slower at decode (256 x
#   32K 25.40 vs 24.53 ms) and that code is reverted, so this script needs that commit.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_moe_gluon_gpu.py -k "w4a8" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -6
  timeout 200 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
    --w4a8-stages 0 --w4a8-variants default 1:128:80:2 1:-:-:2 default >"$OUT/moe.log" 2>&1
  echo "moe rc=$?"; grep -E "w4a8" "$OUT/moe.log" | head -30
  for v in 1:128:80:1 1:128:80:2; do
    timeout 150 python3 bench/decode.py --batches 64,256 --contexts 32768 --no-eager \
      --no-profile --w4a8-decode-variant "$v" --out "$OUT/tma${v//:/_}" \
      >"$OUT/decode_${v//:/_}.log" 2>&1
    echo "decode $v rc=$?"
    sed -n '/^## decode/,$p' "$OUT/decode_${v//:/_}.log" | grep -E "^\| (64|256) \|"
  done ;;
esac
rm -f "$OUT/install.log"
