#!/usr/bin/env bash
# Device round 236 (session 47) (≈ 5 min): round 235 with the expert GEMM's register layout
# (group_layout) and the shared expert's stacked pair built once too, against ab-base.tar
# (771b582). GPU checks (linear_ss, the producer-warp expert GEMM, the shared expert, the tiny
# model against the reference); the lone 4K prompt (twins held), 7 repeats with host phases,
# base / new once each; 64 prompts of 128 tokens, base / new once. Carry ab-base.tar. Pass the
# commit hash literally.
GPU_TESTS="tests/gpu/test_linear_ss_gpu.py tests/gpu/test_moe_gluon_gpu.py
  tests/gpu/test_shared_expert_gpu.py tests/gpu/test_model_gpu.py" \
  GPU_K="linear_ss or row_stores or shared or model" LONE_PAIRS=1 LONE_REPEATS=7 \
  bash "$(dirname "$0")/h200_round235.sh"
