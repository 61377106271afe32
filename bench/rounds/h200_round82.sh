#!/usr/bin/env bash
# Device round 82 (session 17): the prefill expert GEMM's instruction diet — the scale
# multiplier built once per row and group (not per word), and the one-accumulator K loops
# unrolled by two so the decoded operands never cross the back edge (SASS per step: 356 ->
# 326 / 324 -> 302 / 356 -> 317 instructions). Round 81 found the kernel issue-bound at 4K
# tokens (~64 pairs per expert): w1 2.060 / w2 2.034 ms.
#   PART=a (≈ 5 min): GPU checks of the kernel, the GEMMs (w4a16_probe base), the expert
#     pipeline at 4K / 16K tokens, the 4K prefill (unprofiled).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_moe_gluon_gpu.py \
    -k "w4a16" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "$OUT/tests.log" | tail -4
  timeout 120 python3 bench/w4a16_probe.py --probe base >"$OUT/probe.log" 2>&1
  echo "probe rc=$?"; grep -E "^\| " "$OUT/probe.log"
  timeout 100 python3 bench/moe_gluon_prefill.py --tokens 4096 16384 --bm 32 --warpgroups 1 \
    --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 4 >"$OUT/moe_prefill.log" 2>&1
  echo "moe_gluon_prefill rc=$?"; grep -E "^\| [0-9]+ \| w4a16" "$OUT/moe_prefill.log"
  timeout 150 python3 bench/prefill.py --prompt-lens 4096 --no-eager --no-profile \
    >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096" "$OUT/prefill.log" ;;
esac
rm -f "$OUT/install.log"
