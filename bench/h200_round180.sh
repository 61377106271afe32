#!/usr/bin/env bash
# Device round 180 (session 37) (≈ 7 min): the W4A8 decode expert GEMM with a step's refills
# (the weights' TMA and the next codes' cp.async) issued after its wgmmas
# (``moe_gluon_w4a8.DECODE_REFILL_LATE``; sm_90 SASS: ~30 instructions and the refill's
# barriers move under the wgmmas, 349 -> 355 a step in the paired gated loop):
#   * the GPU checks of tests/gpu/test_moe_gluon_gpu.py's W4A8 decode GEMMs (REFILL_LATE's
#     bits against the default order's, both orders against the reference);
#   * the gated and down GEMMs alone at 64 / 256 tokens, the orders interleaved twice;
#   * decode 64 / 256 x 4K end to end, the orders interleaved (--w4a8-decode-variant).
# Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
timeout 120 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf -k "w4a8" \
  tests/gpu/test_moe_gluon_gpu.py >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|[0-9]+ passed|[0-9]+ failed" "$OUT/gpu.log" | tail -6
timeout 200 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
  --w4a8-variants late=0 late=1 late=0 late=1 >"$OUT/moe.log" 2>&1
echo "moe rc=$?"; grep -E "w4a8|ceiling|Error|error" "$OUT/moe.log" | head -24
for late in 0 1; do
  timeout 120 python3 bench/decode.py --out "$OUT/late$late" --batches 64,256 --contexts 4096 \
    --no-eager --no-profile --w4a8-decode-variant "1:128:80:1:1:$late" \
    >"$OUT/decode_late$late.log" 2>&1
  echo "decode late=$late rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode_late$late.log" | grep -E "^\| [0-9]" | head -4
done
rm -f "$OUT/install.log"
