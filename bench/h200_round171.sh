#!/usr/bin/env bash
# Device round 171 (session 33; after round 170) (≈ 9 min): session 33's output stores and the
# persistent linear_wide (kernels/triton/linear_wide_persistent.py), prepared without a GPU
# (compiled for sm_90 only) —
#   * the prefill expert GEMMs' 16-byte output stores (VEC_STORE): their bit check against the
#     2-byte stores, then bench/moe_gluon_prefill.py at the 4K shape, ws / ws+vec / ws / ws+vec;
#   * its GPU check: linear_wide's bits at the 4,096-row launches (two warpgroups, 4 stages;
#     one, 3 stages), split and not, wq_b / wo_b / wo_a grouped, each call timed against the
#     base kernel (test_linear_wide_persistent_gpu);
#   * bench/gemm_decode.py at 4,096 rows: wide_config's launch (gl) against the same launch
#     persistent with 16-byte stores (glp) and with the MMA layout's 2-byte ones (glps), twice,
#     the seven slice projections;
#   * only if the checks passed: the lone 4K prompt with --linear-wide-persistent-rows 0 / 1024
#     and --w4a16-vec-store 0 / 1 together (base / new, twice), then each alone once.
# Pass the commit hash literally. Make PERSISTENT_MIN_ROWS the default only on a win end to end.
source "$(dirname "$0")/device_setup.sh"
timeout 240 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_linear_wide_gpu.py tests/gpu/test_moe_gluon_gpu.py -k "persistent or vec_store" \
  >"$OUT/gpu.log" 2>&1
check=$?
echo "gpu check rc=$check"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -4
grep -E "^\| (persistent|base)" "$OUT/gpu.log" | cut -c1-110
for i in 1 2; do
  timeout 150 python3 bench/gemm_decode.py --rows 4096 --variants gl,glp,glps \
    >"$OUT/gemm_$i.log" 2>&1
  echo "gemm_decode $i rc=$?"; grep -E "^\|" "$OUT/gemm_$i.log" | cut -c1-120 | head -18
done
MOE4=(--tokens 4096 --bm 256 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 1
      --w4a16-rep 2 --w4a16-parts 4 --w4a16-kernel ws ws+vec ws ws+vec)  # --bm 256: no FP8 rows
timeout 150 python3 bench/moe_gluon_prefill.py "${MOE4[@]}" >"$OUT/moe4k_vec.log" 2>&1
echo "moe 4K vec rc=$?"; grep -E "^\| 4096 \| w4a16 (gate|up|down)|bit-identical" \
  "$OUT/moe4k_vec.log" | cut -c1-120 | head -16
if [ $check -eq 0 ]; then
  prefill_ab() {  # $1: label; the rest: prefill.py flags
    local label=$1 log; shift
    log="$OUT/prefill_$label.log"
    timeout 120 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager "$@" \
      --out /tmp/j >"$log" 2>&1
    echo "$label rc=$?"; grep -E "^prefill [0-9]" "$log"
    grep -E "^\| (dense|routed)" "$log" | head -2
  }
  for i in 1 2; do
    prefill_ab "base_$i" --linear-wide-persistent-rows 0 --w4a16-vec-store 0
    prefill_ab "new_$i" --linear-wide-persistent-rows 1024 --w4a16-vec-store 1
  done
  prefill_ab persistent_only --linear-wide-persistent-rows 1024 --w4a16-vec-store 0
  prefill_ab vec_only --linear-wide-persistent-rows 0 --w4a16-vec-store 1
fi
rm -f "$OUT/install.log"
