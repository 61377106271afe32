#!/usr/bin/env bash
# Device round 171 (session 33; after round 170) (≈ 6 min): the persistent linear_wide
# (kernels/triton/linear_wide_persistent.py, prepared without a GPU: compiled for sm_90 only) —
#   * its GPU check: linear_wide's bits at the 4,096-row launches (two warpgroups, 4 stages;
#     one, 3 stages), split and not, wq_b / wo_b / wo_a grouped, each call timed against the
#     base kernel (test_linear_wide_persistent_gpu);
#   * bench/gemm_decode.py at 4,096 rows: wide_config's launch (gl) against the same launch
#     persistent with 16-byte stores (glp) and with the MMA layout's 2-byte ones (glps), twice,
#     the seven slice projections;
#   * only if the check passed: the lone 4K prompt with --linear-wide-persistent-rows 0 / 1024 /
#     0 / 1024 (the persistent kernel for every 256-row-tile launch of the prompt).
# Pass the commit hash literally. Make PERSISTENT_MIN_ROWS the default only on a win end to end.
source "$(dirname "$0")/device_setup.sh"
timeout 200 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_linear_wide_gpu.py -k "persistent" >"$OUT/gpu.log" 2>&1
check=$?
echo "gpu check rc=$check"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -4
grep -E "^\| (persistent|base)" "$OUT/gpu.log" | cut -c1-110
for i in 1 2; do
  timeout 150 python3 bench/gemm_decode.py --rows 4096 --variants gl,glp,glps \
    >"$OUT/gemm_$i.log" 2>&1
  echo "gemm_decode $i rc=$?"; grep -E "^\|" "$OUT/gemm_$i.log" | cut -c1-120 | head -18
done
if [ $check -eq 0 ]; then
  for i in 1 2; do
    for rows in 0 1024; do
      log="$OUT/prefill_persistent${rows}_$i.log"
      timeout 120 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager \
        --linear-wide-persistent-rows $rows --out /tmp/j >"$log" 2>&1
      echo "persistent rows $rows ($i) rc=$?"; grep -E "^prefill [0-9]" "$log"
      grep -E "^\| (dense|routed)" "$log" | head -2
    done
  done
fi
rm -f "$OUT/install.log"
