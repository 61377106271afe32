#!/usr/bin/env bash
# Device round 128 (session 22): the router's decode tiles (moe_routing.ROUTE_DECODE_MAX_TOKENS
# = 256: BM 16 x BE 32 up to 256 tokens, 192 programs at 256 instead of 24). PART a: the
# router's GPU checks at 64 / 256 / 4,096 tokens, then decode 256 x 32K with the new tiles and
# the old ones (--route-decode-max-tokens 64) interleaved, new / old / new, profiles off
# (≈ 4 min). PART b: the session's end figures — decode 64 / 256 x 4K / 32K, the 4K and 16K
# prefill (≈ 5 min). PART c: decode 64 x 4K / 32K against e23ad5c (≈ 4 min).
source "$(dirname "$0")/../device_setup.sh"
dec() {  # $1: label, $2...: decode.py flags
  local label=$1; shift
  timeout 150 python3 bench/decode.py --no-eager --no-profile --out /tmp/j "$@" \
    >"$OUT/decode_$label.log" 2>&1
  echo "decode $label rc=$?"
  sed -n '/^## decode/,$p' "$OUT/decode_$label.log" | grep -E "^\| (64|128|256) \|"
}
mkdir -p /tmp/j
case "${PART:-a}" in
a)
  timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf -q -s \
    tests/gpu/test_gemm_side_gpu.py -k route >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^\| route|passed|failed|^(FAILED|ERROR)" "$OUT/tests.log" \
    | tail -8
  dec new1 --batches 256 --contexts 32768
  dec old1 --batches 256 --contexts 32768 --route-decode-max-tokens 64
  dec new2 --batches 256 --contexts 32768
  dec old2 --batches 256 --contexts 32768 --route-decode-max-tokens 64 ;;
b)
  timeout 300 python3 bench/decode.py --batches 64,256 --contexts 4096,32768 --no-eager \
    --profile-points 256x32768 --out "$OUT" >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| (64|256) \|"
  grep -A 12 "kernels at" "$OUT/decode.log" | head -14 | cut -c1-120
  timeout 200 python3 bench/prefill.py --prompt-lens 4096,16384 --no-eager --no-profile \
    --out "$OUT" >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| (4096|16384) \|" "$OUT/prefill.log" ;;
c)  # 64 x 32K came out at 13.99 ms in PART b (12.91 in round 127a): this tree against e23ad5c
  # (carry ab-base.tar = `git archive e23ad5c`, round 127a's tree) on one machine, interleaved
  ab_base_tree ab-base.tar || exit 1
  dec now1 --batches 64 --contexts 4096,32768
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH dec base1 --batches 64 --contexts 4096,32768)
  dec now2 --batches 64 --contexts 4096,32768
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH dec base2 --batches 64 --contexts 4096,32768) ;;
esac
rm -f "$OUT/install.log"
