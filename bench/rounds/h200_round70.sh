#!/usr/bin/env bash
# Device round 70 (session 15): the bf16 prefill expert GEMM over W4A8-order weights
# (`kernels/triton/moe_gluon_w4a16_prefill.py`: the MXFP4 weights decoded to exactly scaled
# bf16 in the wgmma register-A layout, tokens gathered in its K order; no per-32-K promotion).
# The FP8 prefill kernel it replaces ran at ~190 TFLOP/s, 72.8 of the 4K prefill's 142.5 ms
# (session 14, round 67a). Compiled for sm_90 on the CPU only so far.
#   PART=a (≈ 5 min): the GPU checks (tests/gpu/test_moe_gluon_gpu.py -k w4a16: each GEMM
#     against the reference at 1e-5, the pipeline against run_experts, the dispatch), then
#     bench/moe_gluon_prefill.py at 4K / 16K tokens: FP8 (BM 32) against bf16 at BM 64 / 128,
#     3 / 4 stages.
#   Round 71 = PART=a with W4A16_BM="64 128" W4A16_STAGES="2 3" W4A16_WG="1 2 4" (warpgroups
#     per program sharing the token tile: the L2 -> shared token traffic is BM x 256 B per
#     64 x BM x 128 MACs at one warpgroup).
#   Round 72 = PART=a with W4A16_BM=128 W4A16_STAGES=2 W4A16_WG=2 W4A16_PARTS="1 2" (then --w4a16-halves "0 1"; blocks
#     at most half full on N = BM / 2), then PART=b.
#   PART=b (≈ 4 min): the 4K / 16K prefill with --w4a8-prefill-kernel w4a16 (profiled).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf -s -x \
    tests/gpu/test_moe_gluon_gpu.py -k "w4a16 or w4a8_prefill_gluon" >"$OUT/w4a16_tests.log" 2>&1
  echo "w4a16 GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" \
    "$OUT/w4a16_tests.log" | tail -6; grep -E "^\| w4a16" "$OUT/w4a16_tests.log" | head -12
  timeout 240 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 --warpgroups 1 \
    --w4a16-bm ${W4A16_BM:-64 128} --w4a16-stages ${W4A16_STAGES:-3 4} \
    --w4a16-wg ${W4A16_WG:-1} --w4a16-parts ${W4A16_PARTS:-1} >"$OUT/moe_prefill.log" 2>&1
  echo "moe_gluon_prefill rc=$?"; grep -E "^\| [0-9]|HBM" "$OUT/moe_prefill.log" ;;
b)
  timeout 300 python3 bench/prefill.py --out "$OUT" --no-eager --w4a8-prefill-kernel w4a16 \
    >"$OUT/prefill.log" 2>&1
  echo "prefill (--w4a8-prefill-kernel w4a16) rc=$?"
  sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -16 ;;
esac
rm -f "$OUT/install.log"
