#!/usr/bin/env bash
# Device round 6 (first round of a session): every GPU kernel check against its reference
# (tests/gpu, fresh random inputs, NaN-poisoned outputs), then round 5 (deepinfer-compile +
# deepinfer-run of 64 prompts with graphs, the MoE kernel alone, one decode point with its
# profile, one 4K prefill). Run with SAVE_TRITON_CACHE=1 to bring the refreshed cache back.
source "$(dirname "$0")/../device_setup.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout ${GPU_TESTS_TIMEOUT:-120} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu \
  >/tmp/gpu_tests.log 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|FAIL" /tmp/gpu_tests.log | tail -15
RUN_TIMEOUT=${RUN_TIMEOUT:-200} bash "$(dirname "$0")/h200_round5.sh"
rm -f "$OUT/install.log"
