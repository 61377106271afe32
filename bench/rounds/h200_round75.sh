#!/usr/bin/env bash
# Device round 75 (prepared in session 15, not run: device time spent). The paged index scores
# in Gluon (`kernels/triton/index_paged_gluon.py`: records gathered by 4-byte cp.async into a
# 4-deep shared ring, decoded by the MXFP4 PTX straight into the wgmma A layout, q^T in shared
# memory as B), compiled for sm_90 on the CPU only. v2 takes 1.36 ms of the 256 x 32K decode
# step (η ~0.28 in round 61a); 256 x 32K needs 0.39 ms for η 0.6 (round 73a: 24.42 ms, 0.590).
#   PART=a (≈ 3 min): its GPU checks (tests/gpu/test_attention_side_gpu.py -k index_scores_paged:
#     gl against the fp64 reference beside v2 and v1, the -inf pattern exact), then
#     bench/index_decode.py at the slice's ratios 1 and 2: gl (programs over all rows 1,024 /
#     660 = 5 per SM at 98 registers / 2,048; ring of 4 or 3 tiles) against v2.
#   PART=b (≈ 4 min): decode 64 / 256 x 4K / 32K with --index-paged-kernel gl, saving the
#     Triton cache (copy the parts to the repo root and carry them next time).
[ "${PART:-a}" = b ] && export SAVE_TRITON_CACHE=1  # read when device_setup.sh is sourced
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -s \
    tests/gpu/test_attention_side_gpu.py -k "index_scores_paged" >"$OUT/index_tests.log" 2>&1
  echo "paged index GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" \
    "$OUT/index_tests.log" | tail -6; grep -E "index_scores_paged" "$OUT/index_tests.log" | head -10
  for R in 1 2; do
    timeout 120 python3 bench/index_decode.py --ratio $R --width $((65536 / R)) \
      --shapes 64:4096,256:4096,64:32768,256:32768 --variants 128:1024:4,gl,gl:660,gl:660:3,gl:2048 \
      >"$OUT/index_decode_r$R.log" 2>&1
    echo "index_decode ratio $R rc=$?"; grep -E "^\| [0-9]" "$OUT/index_decode_r$R.log"
  done ;;
b)
  timeout 300 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 256x32768 --gap-prompts 16 --gap-tokens 32 \
    --index-paged-kernel gl >"$OUT/decode.log" 2>&1
  echo "decode (--index-paged-kernel gl) rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_index|start-up|idle|target" | head -16 ;;
esac
rm -f "$OUT/install.log"
