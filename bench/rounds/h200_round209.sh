#!/usr/bin/env bash
# Device round 209 (session 42) (≈ 5 min): after the session's deletions of off-by-default
# kernels (linear_wide_ws, mhc_site, the FP8 prefill and bf16 decode expert GEMMs, the index
# scores' rows kernel and paged v1): the GPU tests of the touched modules, then a lone 4K prompt
# at the defaults (families; the default path is unchanged, so its time should match the
# card's earlier runs). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 240 python3 -m pytest -q -p no:warnings tests/gpu/test_linear_wide_gpu.py \
  tests/gpu/test_mhc_norm_gpu.py tests/gpu/test_moe_gluon_gpu.py -x >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -3 "$OUT/gpu_tests.log"
prefill_4k
rm -f "$OUT/install.log"
