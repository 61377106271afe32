#!/usr/bin/env bash
# Device round 195 (session 39, prepared for the next session) (≈ 7 min): the index scores'
# and top-k rows invariance (session 39's kernels: test_batch_invariance_gpu.py), the mHC
# coefficients' terms kernel (kernels/triton/mhc_terms.py, mhc.COEFFS_KERNEL "terms", off) —
# its GPU checks (against the reference and the fused kernel, contiguous and stride-0 streams,
# a prefix call's rows), alone at 4K tokens against the fused default (bench/mhc_prefill.py),
# end to end (prefill_ab: fused / terms, the check tokens may differ: another fp32 summation
# order); the keys-on-M index scores' tiling around its KEY_TILES 16 default; then the lone 4K
# prompt at the defaults (an H200 figure for session 39's changes if the card is one). Pass the
# commit hash literally. Ran in session 40 at 0305896 (H100): "terms" level end to end (−0.4 %),
# removed after it (its code: commit 0305896).
source "$(dirname "$0")/../device_setup.sh"
timeout 180 python3 -m pytest -q -p no:warnings tests/gpu/test_gemm_side_gpu.py \
  tests/gpu/test_batch_invariance_gpu.py -k "mhc_terms or mhc_gpu or index_scores_and_topk" \
  >"$OUT/gpu.log" 2>&1
echo "gpu mhc tests rc=$?"; tail -2 "$OUT/gpu.log"
timeout 90 python3 bench/mhc_prefill.py --tokens 4096 \
  --variants "default,terms,terms:128:8:4,terms:64:4:4,terms:256:8:3,default,terms" \
  >"$OUT/mhc.log" 2>&1
echo "mhc_prefill rc=$?"; grep -E "^\| 4096" "$OUT/mhc.log"
timeout 90 python3 bench/index_prefill.py --queries 4096 --keys 2048 --causal 2 \
  --variants "m:4:128:16:8:3,m:8:128:16:8:2,m:4:64:16:4:3,m:4:128:32:8:3,m:8:64:16:4:3" \
  >"$OUT/index.log" 2>&1
echo "index_prefill rc=$?"; grep -E "^\| m" "$OUT/index.log"
prefill_ab_4k 3 "fused=--launch-choice mhc.COEFFS_KERNEL=fused" \
  "terms=--launch-choice mhc.COEFFS_KERNEL=terms"
prefill_4k "_hc_|topk|_chunk_|_scores_keys"
rm -f "$OUT/install.log"
