#!/usr/bin/env bash
# Device round 220 (session 45) (≈ 8 min): the 4K expert GEMM on the producer-warp kernel at
# the 4K shape (BM 128, REP 2, eighths) with its weights in a ring of their own 4 / 6 stages
# deep ahead of the tokens' 2 (WEIGHT_STAGES, new) against the one ring, each also with its
# weights L2-resident (--l2-experts 1 8: whether the weights' HBM stream costs time); the GPU
# bit checks of the deeper weight ring; round 217's attention checks (the pairs kernel, at
# 64-channel heads too); round 218's Nsight Compute on the 4K expert pipeline. Pass the commit
# hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 170 python3 bench/moe_gluon_prefill.py --tokens 4096 --w4a16-bm 128 \
  --w4a16-stages 2 --w4a16-wg 1 --w4a16-rep 2 --w4a16-parts 8 --w4a16-kernel ws \
  --ws-weight-stages 0 4 6 --l2-experts 1 8 --skip-triton >"$OUT/moe_l2.log" 2>&1
echo "moe_gluon_prefill rc=$?"; grep -E "^\||bit-identical" "$OUT/moe_l2.log" | cut -c1-150
timeout 100 python3 -m pytest -q -p no:warnings -s tests/gpu/test_moe_gluon_gpu.py \
  -k "eighths_give or gated_swiglu_epilogue" >"$OUT/gpu_moe.log" 2>&1
echo "moe tests rc=$?"; grep -E "FAILED|Error|passed|failed" "$OUT/gpu_moe.log" | cut -c1-150 | tail -8
timeout 80 python3 -m pytest -q -p no:warnings -s tests/gpu/test_attention_side_gpu.py \
  -k "pairs or bf16_rows" >"$OUT/gpu_attention.log" 2>&1
echo "attention tests rc=$?"; grep -E "FAILED|Error|attention_prefill_pairs|bf16 rows N=1024" \
  "$OUT/gpu_attention.log" | cut -c1-150 | tail -14
bash "$(dirname "$0")/h200_round218.sh"
