#!/usr/bin/env bash
# Device round 189 (session 38) (≈ 2 min): the Q8_32 quantizer without the software e4m3
# rounding when compiled (quant_act.INTERPRETED): its GPU bit checks against torch (quant_q8_32,
# rms_norm_q8, the mHC site's hq, the slot-major SwiGLU against SwiGLU + gather), then the
# kernels that quantize — swiglu, rms_apply, expand_norm (rest_kernels.py, back-to-back calls)
# — this bench script over the package of the tree before it (carry ab-base.tar = `git archive
# 45bfa33`, on PYTHONPATH) and over this one, base / new / base / new.
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_gemm_side_gpu.py \
  tests/gpu/test_mhc_norm_gpu.py tests/gpu/test_moe_gluon_gpu.py \
  -k "quant_q8_32_gpu or rms_norm_q8 or hc_expand_norm or swiglu_slots" >"$OUT/tests.log" 2>&1
echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|mismatches" "$OUT/tests.log" | tail -6
ab_base_tree ab-base.tar || exit 1
for tree in base new base new; do
  if [ $tree = base ]; then
    PYTHONPATH=$AB_PYTHONPATH timeout 60 python3 bench/rest_kernels.py --only-default \
      --kernels swiglu rms_apply expand_norm >"$OUT/rest_$tree.log" 2>&1
  else
    timeout 60 python3 bench/rest_kernels.py --only-default \
      --kernels swiglu rms_apply expand_norm >"$OUT/rest_$tree.log" 2>&1
  fi
  echo "$tree rc=$?"; grep -E "^\| [a-z_]+ \| default|kernels:" "$OUT/rest_$tree.log"
done
rm -f "$OUT/install.log"
