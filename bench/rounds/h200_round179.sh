#!/usr/bin/env bash
# Device round 179 (session 36, for the next session) (≈ 8 min): session 36's defaults on the
# GPU — PARTS 8 (bits checked in round 177), linear_wide's two-warpgroup launches from 128
# programs at 4,096+ rows (WIDE_TWO_WG_ROWS) with their wgmmas before the TMA refill
# (MMA_FIRST) — neither the row rule nor MMA_FIRST-on-two-warpgroups-only ran end to end yet:
#   * tests/gpu/test_linear_wide_gpu.py whole (MMA_FIRST's bits on one and two warpgroups, the
#     launch classes, the 4,096-row projections as wide_config now picks them);
#   * the lone 4K prompt, session 35's defaults against session 36's (4 rounds interleaved,
#     bits compared), then the kernel table / families / host phases at the new defaults;
#   * a 16K prompt (8K chunks) at the new defaults.
# Run it on the H200 if one comes (the targets' card); the slice plan follows the card.
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_linear_wide_gpu.py >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|[0-9]+ passed|[0-9]+ failed" "$OUT/gpu.log" | tail -6
grep -E "^\| linear_wide WG2( first)? wo_b" "$OUT/gpu.log" | cut -c1-120
prefill_ab_4k 4 "s35=--w4a16-prefill-parts 4 --linear-wide-mma-first 0 --linear-wide-two-wg-rows 0" \
  "s36=--w4a16-prefill-parts 8 --linear-wide-mma-first 1 --linear-wide-two-wg-rows 4096"
timeout 150 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --host-phases \
  --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill 4K rc=$?"; grep -E "^prefill [0-9]|^\| 4096|GPU busy" "$OUT/prefill_4k.log"
grep -A8 -E "^its kernels by family" "$OUT/prefill_4k.log" | cut -c1-200
timeout 120 python3 bench/prefill.py --prompt-lens 16384 --repeats 1 --no-eager --no-profile \
  --out "$OUT/16k" >"$OUT/prefill_16k.log" 2>&1
echo "prefill 16K rc=$?"; grep -E "^prefill [0-9]|^\| 16384" "$OUT/prefill_16k.log"
rm -f "$OUT/install.log"
