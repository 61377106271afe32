#!/usr/bin/env bash
# Device round 185 (session 38) (≈ 7-8 min): the 4K prefill's memory-bound kernels alone
# (bench/rest_kernels.py: the mHC expand + collapse + norm, the norm alone, the experts' token
# gather, the slot-major SwiGLU, the ordered combine) under several launch configs against the
# copy ceiling of the same run; then the fastest variants end to end (prefill_ab.py, a lone 4K
# prompt against the defaults). Nsight Compute on each default: round 186.
# The expand's code changed in this session (``mhc.expand_stream``: one [BD] vector per stream,
# no layout conversions): the same sweep of expand_norm from the tree before it (carry
# ab-base.tar = `git archive 1817d69`) times the old code on this card.
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
if ab_base_tree ab-base.tar; then
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 90 python3 bench/rest_kernels.py \
    --kernels expand_norm) >"$OUT/rest_base.log" 2>&1
  echo "base (1817d69) expand_norm rc=$?"; grep -E "^\| expand|ceiling" "$OUT/rest_base.log"
fi
timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_mhc_norm_gpu.py \
  -k "not site_probe" >"$OUT/tests.log" 2>&1
echo "GPU checks (mhc_norm) rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
timeout 240 python3 bench/rest_kernels.py >"$OUT/rest.log" 2>&1
echo "rest_kernels rc=$?"; grep -E "^\||ceiling" "$OUT/rest.log" | grep -v "^|---"
# the fastest variants end to end against the defaults (a lone 4K prompt, interleaved)
PICK=$(python3 bench/rest_kernels.py --pick "$OUT/rest.log")
BASE=$(python3 bench/rest_kernels.py --pick "$OUT/rest.log" --pick-defaults)
echo "fastest: $PICK"
if [ -n "$PICK" ] && [ "$PICK" != "$BASE" ]; then
  prefill_ab_4k 4 "defaults=$BASE" "fastest=$PICK"
fi
rm -f "$OUT/install.log"
