#!/usr/bin/env bash
# Device round 54 (prepared in session 12, not run: device time spent). The W4A8 decode GEMM
# with its activation codes and scale words loaded one K step ahead (round 53: "long
# scoreboard" 2.1 and "barrier" 1.7 of 7.5 warp cycles per issued instruction at 256 tokens),
# scales as int32 words in the accumulator's layouts, register caps 128 (gated: 124 regs, 4
# programs per SM as before) / 80 (down: 78, 6 per SM instead of 7). Carry the triton-cache
# parts. Two calls:
#   PART=a (≈ 4 min): the Gluon GPU checks, then bench/moe_gluon_decode.py at 64 / 256 tokens
#     (compare round 40a: W4A8 gated BM 8 0.946 / 1.519 ms, down 0.490 / 0.796) and
#     bench/moe_decode.py (the engine's run_experts on the W4A8 layout: 1.526 / 2.421 ms), then
#     the prefill kernel at 8 / 16 pairs per program against the decode pipeline (CUDA graphs;
#     it compiles at 58 / 80 registers: 8 / 6 programs per SM).
#   PART=b (≈ 3 min): decode 64 / 256 x 4K / 32K with profiles — compare session 12's round 51
#     (64 x 4K 14.25 ms, 256 x 32K 27.89; `_w4a8_decode_kernel` 9.5 / 17.3 ms per step). If
#     slower, revert kernels/triton/moe_gluon_w4a8.py's step loop to commit 58d9602's.
#   PART=c (≈ 4 min): the logit head (fp32 x, bf16 weight 129280 x 4096) on linear_decode
#     (token tiles of 128 rows, promoted per BK step) against _linear_kernel at 1 / 64 / 256
#     rows (its check prints both timings), then decode with --linear-decode-fp32-x; if faster,
#     set linear.DECODE_KERNEL_FP32_X = True. (Ran in session 13: slower; the switch, the flag
#     and linear_decode's fp32-x path were removed after it, so PART=c no longer runs.)
#   PART=e (≈ 3 min; BM=8 or 16 from PART=a): decode with decode-sized W4A8 expert calls on
#     the prefill pipeline (--w4a8-decode-bm; moe_experts.W4A8_DECODE_PREFILL_BM).
#   PART=d (≈ 2 min): decode 256 x 4K / 32K with the 256-row mHC coefficient calls on the
#     prefill launch (BM 64, bf16x3; --mhc-decode-max-tokens 128) — round 51's profile:
#     `_hc_coeffs_kernel` 0.85 ms + `_hc_finalize_kernel` 0.12 ms per 256 x 32K step.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_moe_gluon_gpu.py \
    >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|gluon (gated|down)|pipeline" \
    "$OUT/gpu_tests.log" | tail -16
  timeout 150 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
    --w4a8-bm 8 --w4a8-stages 3 4 >"$OUT/gluon.log" 2>&1
  echo "gluon rc=$?"; grep -E "^\||Error|error|mismatch" "$OUT/gluon.log" | head -30
  timeout 150 python3 bench/moe_decode.py --tokens 64 256 --config-tokens 0 \
    >"$OUT/moe_decode.log" 2>&1
  echo "moe_decode rc=$?"; grep -E "^\|" "$OUT/moe_decode.log" | head -16
  # the prefill kernel (both operands by TMA, no per-step CTA store of the codes) at 8 / 16
  # pairs per program, against the decode pipeline, as CUDA graphs
  timeout 150 python3 bench/moe_gluon_prefill.py --tokens 64 256 --bm 8 16 --stages 3 4 \
    --warpgroups 1 --graphs >"$OUT/prefill_kernel_at_decode.log" 2>&1
  echo "prefill kernel at decode rc=$?"; grep -E "all launches|Error|error" \
    "$OUT/prefill_kernel_at_decode.log" | head -14 ;;
b)
  timeout 220 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_w4a8_decode|start-up|idle|target" | head -16 ;;
c)
  echo "PART=c ran in session 13 (round 54c); its switch is gone: see the header" ;;
d)
  timeout 200 python3 bench/decode.py --out "$OUT" --batches 256 --contexts 4096,32768 \
    --no-eager --profile-points 256x32768 --gap-prompts 16 --gap-tokens 32 \
    --mhc-decode-max-tokens 128 >"$OUT/decode_mhc.log" 2>&1
  echo "decode (256-row mHC on the prefill launch) rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode_mhc.log" | grep -v "^USDT" \
    | grep -E "^\| 256 \||busy|_hc_" | head -10 ;;
e)
  # after PART=a: the faster of BM 8 / 16 in "prefill kernel at decode" (pass it as $BM)
  timeout 220 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 256x32768 --gap-prompts 16 --gap-tokens 32 \
    --w4a8-decode-bm "${BM:-16}" >"$OUT/decode_w4a8_bm.log" 2>&1
  echo "decode (W4A8 prefill pipeline at decode, BM ${BM:-16}) rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode_w4a8_bm.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_w4a8" | head -10 ;;
esac
rm -f "$OUT/install.log"
