#!/usr/bin/env bash
# Device round 73 (session 15): session 15's final prefill defaults end to end — the bf16
# prefill expert GEMM (rounds 70-72), the token gather with contiguous loads and an in-register
# K permutation, RoPE in place on q and on the attention output (only the 64 rotated channels
# of each 512 are read and written) — and decode 256 x 32K (the point whose target is missed)
# with the in-place RoPE.
#   PART=a (≈ 5 min): GPU checks (the w4a16 GEMMs with the new gather; RoPE in and out of
#     place), the 4K / 16K prefill (profiled), decode 256 x 32K (profiled).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf -s \
    tests/gpu/test_moe_gluon_gpu.py tests/gpu/test_gemm_side_gpu.py -k "w4a16 or apply_rope" \
    >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "$OUT/tests.log" \
    | tail -6; grep -E "^\| apply_rope" "$OUT/tests.log" | head -8
  timeout 200 python3 bench/prefill.py --out "$OUT" --no-eager >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -22
  timeout 170 python3 bench/decode.py --out "$OUT" --batches 256 --contexts 32768 --no-eager \
    --profile-points 256x32768 --gap-prompts 16 --gap-tokens 32 >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| 256 \||busy|_rope|start-up|idle|target" | head -12 ;;
esac
rm -f "$OUT/install.log"
