#!/usr/bin/env bash
# Device round 56 (session 13). Round 54a: the W4A8 decode GEMM with codes and scale words one
# K step ahead was slower than round 40a's (gated 0.946 -> 1.020 ms at 64 tokens, down 0.490 ->
# 0.654; only the gated kernel at 256 tokens gained, 1.519 -> 1.427), and the prefill pipeline
# at 8 pairs per program stopped at an assertion (now allowed: it compiles at 58 registers).
# DECODE_PREFETCH is now a switch (default off) and the scales stay int32 words. Carry the
# triton-cache parts and an untracked kernels/triton/moe_gluon_w4a8_58d9602.py (`git show
# 58d9602:kernels/triton/moe_gluon_w4a8.py`: the round-40a kernel, for the A/B only).
#   PART=a (≈ 4 min): the Gluon GPU checks; bench/moe_gluon_decode.py at 64 / 256 tokens over
#     the variants (58d9602's module, the default, down capped at 72, prefetch capped / not);
#     the prefill kernel at 8 / 16 pairs per program at decode sizes (CUDA graphs).
#   PART=b (≈ 3 min): decode 64 / 256 x 4K / 32K with $VARIANT (--w4a8-decode-variant, empty:
#     the default) and $BM (--w4a8-decode-bm, empty: the decode pipeline) — compare round 51.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -s tests/gpu/test_moe_gluon_gpu.py \
    >"$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|w4a8 (gluon|prefill) pipeline" \
    "$OUT/gpu_tests.log" | tail -12
  timeout 240 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
    --w4a8-bm 8 --w4a8-stages 3 4 --w4a8-variants module=moe_gluon_w4a8_58d9602 default \
    0:-:72 1:128:80 1:-:- >"$OUT/gluon.log" 2>&1
  echo "gluon rc=$?"; grep -E "^\| .*w4a8|Error|error|mismatch" "$OUT/gluon.log" \
    | sed -e 's/ | [0-9.]* | [0-9.]* | [0-9]* | \(0\.[0-9]*\) | .*$/ η \1/' | head -44
  timeout 150 python3 bench/moe_gluon_prefill.py --tokens 64 256 --bm 8 16 --stages 3 4 \
    --warpgroups 1 --graphs >"$OUT/prefill_kernel_at_decode.log" 2>&1
  echo "prefill kernel at decode rc=$?"; grep -E "all launches|Error|error" \
    "$OUT/prefill_kernel_at_decode.log" | head -14 ;;
b)
  extra=()
  [ -n "${VARIANT:-}" ] && extra+=(--w4a8-decode-variant "$VARIANT")
  [ -n "${BM:-}" ] && extra+=(--w4a8-decode-bm "$BM")
  timeout 230 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    "${extra[@]}" >"$OUT/decode.log" 2>&1
  echo "decode (${extra[*]}) rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_w4a8|start-up|idle|target" | head -16 ;;
esac
rm -f "$OUT/install.log"
