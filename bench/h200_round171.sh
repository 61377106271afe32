#!/usr/bin/env bash
# Device round 171 (session 33; after round 170) (≈ 6 min): session 33's 16-byte output
# stores, prepared without a GPU (compiled for sm_90 only), checked and timed alone (the
# persistent linear_wide it also checked was removed in session 35: no gain end to end in
# rounds 172 / 174) —
#   * GPU checks (bits against the shipped kernels, each call timed): linear_wide's 16-byte
#     stores at 64 / 200 / 4,096 rows; the prefill expert GEMMs' 16-byte stores (both kernels);
#   * bench/gemm_decode.py at 4,096 rows: wide_config's launch (gl), with 16-byte stores (glv),
#     gl again (the run's drift), the seven slice projections;
#   * bench/moe_gluon_prefill.py at the 4K shape: ws / ws+vec / ws / ws+vec (gated and down
#     GEMMs, the whole pipeline; bits against the first row).
# Round 172 runs the lone 4K prompt with what wins. Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
timeout 320 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_linear_wide_gpu.py tests/gpu/test_moe_gluon_gpu.py \
  -k "vec_store" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -4
grep -E "^\| (persistent|base|vec|u16)" "$OUT/gpu.log" | cut -c1-110
timeout 120 python3 bench/gemm_decode.py --rows 4096 --variants gl,glv,gl \
  >"$OUT/gemm.log" 2>&1
echo "gemm_decode rc=$?"; grep -E "^\|" "$OUT/gemm.log" | cut -c1-120 | head -40
MOE4=(--tokens 4096 --bm 256 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 1
      --w4a16-rep 2 --w4a16-parts 4 --w4a16-kernel ws ws+vec ws ws+vec)  # --bm 256: no FP8 rows
timeout 120 python3 bench/moe_gluon_prefill.py "${MOE4[@]}" >"$OUT/moe4k_vec.log" 2>&1
echo "moe 4K vec rc=$?"; grep -E "^\| 4096 \| w4a16|bit-identical" "$OUT/moe4k_vec.log" \
  | cut -c1-120 | head -16
rm -f "$OUT/install.log"
