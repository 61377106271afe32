#!/usr/bin/env bash
# Device round 214 (session 43) (≈ 4 min): after the deletions of off-by-default branches inside
# default kernels — the W4A8 decode GEMM's DECODE_PREFETCH / DECODE_XCP / DECODE_PAIRED (the down
# GEMM always paired on the gated loop), the attention row splits (DECODE_ROW_SPLITS,
# attention_decode.ROW_SPLITS, the merge kernel), _moe_gemm_kernel's SWAP_AB and gemm_fp8's
# engram_gather_linear (GATHER_COLS): the GPU tests of the touched kernels. The default launches'
# sm_90 SASS was checked on the CPU (identical but for parameter offsets and, in v1's record
# decode, ptxas scheduling); these run the kernels against their references on the card. Pass
# the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
# the W4A8 decode GEMM: gated / paired down at 8 and 16 pairs, the whole pipeline vs run_experts
timeout 75 python3 -m pytest -q -p no:warnings -s tests/gpu/test_moe_gluon_gpu.py -k w4a8 \
  >"$OUT/gpu_w4a8.log" 2>&1
echo "w4a8 rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/gpu_w4a8.log" | tail -6
# the sparse attention without row splits: records (v2 decode, v1 prefill), bf16 rows (v1 / gl)
timeout 70 python3 -m pytest -q -p no:warnings -s tests/gpu/test_attention_side_gpu.py \
  -k "sparse_attention_records or sparse_attention_bf16_rows" >"$OUT/gpu_attention.log" 2>&1
echo "attention rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/gpu_attention.log" | tail -6
# the Triton expert GEMM without SWAP_AB (decode and prefill tilings, the vouched loop),
# gemm_q8 without the gather (decode split-K and prefill tiles), the shared expert's FP8 path at
# 64 rows (gemm_q8 at decode rows)
timeout 95 python3 -m pytest -q -p no:warnings -s tests/gpu/test_gemm_side_gpu.py \
  tests/gpu/test_shared_expert_gpu.py \
  -k "linear_quant_act or moe_experts_accuracy or moe_vouched or (dense_path and 64)" \
  >"$OUT/gpu_gemm_side.log" 2>&1
echo "gemm side rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/gpu_gemm_side.log" | tail -6
rm -f "$OUT/install.log"
