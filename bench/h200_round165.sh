#!/usr/bin/env bash
# Device round 165 (prepared in session 31, not run; after round 164) (≈ 7 min): the gated
# expert GEMM with the SwiGLU and its Q8_32 rounding in its epilogue
# (kernels/triton/moe_gluon_w4a16_gated.py, off: moe_gluon_w4a16_prefill.GATED_SWIGLU):
#   * its GPU checks — bit for bit against the two gated GEMMs + swiglu_fake_q8_slots at BM 128
#     / 64, both decodes, every quarter fill (timed against them), and the pipeline with the
#     flag on against off;
#   * a lone 4K prompt with --gated-swiglu 0 / 1, interleaved twice (the prompt's 4K steps are
#     REP 2: ~64 pairs per expert).
# Turn GATED_SWIGLU on if the checks pass and 1 is faster in both pairs. Pass the commit hash
# literally.
source "$(dirname "$0")/device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -q -m gpu -s tests/gpu/test_moe_gluon_gpu.py \
  -k "gated_swiglu" >"$OUT/gpu_gated.log" 2>&1
echo "gated checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|^gated \+ SwiGLU" \
  "$OUT/gpu_gated.log" | tail -8
for i in 1 2; do
  for flag in 0 1; do
    timeout 140 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --no-profile \
      --gated-swiglu $flag --out /tmp/j >"$OUT/prefill_gated${flag}_$i.log" 2>&1
    echo "gated-swiglu $flag run $i rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_gated${flag}_$i.log"
  done
done
rm -f "$OUT/install.log"
