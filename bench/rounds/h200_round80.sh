#!/usr/bin/env bash
# Device round 80 (session 16): the scale loads of the prefill expert GEMM and linear_wide no
# longer carried over the K loop's back edge (the SASS showed ptxas copying the value loaded a
# step ahead at the end of each step, waiting for the load there: ncu's top stall in round 76a
# was long scoreboard, 1.96 per issue). Compare with round 79a (4K prefill 110.2 ms, decode
# 256 x 32K 23.92 ms) — another machine: only a large change counts.
#   PART=a (≈ 6 min): GPU checks of both kernels, the 4K prefill (unprofiled), decode 256 x
#     32K (unprofiled), then the expert pipeline alone at 4K / 16K tokens.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 100 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_linear_wide_gpu.py \
    tests/gpu/test_moe_gluon_gpu.py -k "wide or w4a16" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "$OUT/tests.log" | tail -4
  timeout 100 python3 bench/prefill.py --prompt-lens 4096 --no-eager --no-profile \
    >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096" "$OUT/prefill.log"
  timeout 110 python3 bench/decode.py --batches 256 --contexts 32768 --no-eager --no-profile \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| 256 \|"
  timeout 60 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 --warpgroups 1 \
    --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 4 >"$OUT/moe_prefill.log" 2>&1
  echo "moe_gluon_prefill rc=$?"; grep -E "^\| [0-9]+ \| w4a16" "$OUT/moe_prefill.log" ;;
esac
rm -f "$OUT/install.log"
