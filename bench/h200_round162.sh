#!/usr/bin/env bash
# Device round 162 (prepared in sessions 29-30, not run: no device machine was lent; it takes
# round 161's place): sessions 29-30's changes and session 28's defaults end to end —
#   * GPU checks: the experts on Q8_32 values rounded once (x_rounded: the same bits); the
#     slot-major SwiGLU against SwiGLU + gather (bits, 1K-8K tokens); the align kernels bit for bit against the torch version
#     (one program; the chunks above 8,192 pairs, up to 196,608 pairs; CUDA-graph replays of
#     both); the prefill expert GEMM and its pipeline (base / ws / auto bits); the shared
#     expert (its weight-free SwiGLU: the bits of weights of 1); batch invariance; the tiny
#     model's GPU checks (the model now on session 30's fused mHC sites; their kernels alone,
#     the promoted projections and the site probe: round 163);
#   * a lone 4K prompt and 8 x 4K in one generate with the kernel tables by family, the host
#     phases and --op-stacks (the torch ops by own device time with the code that issued them:
#     the ~71 µs direct_copy a layer is the one to name) (≈ 8 min). Pass the commit hash
#     literally. bench/moe_align.py and decode 64 / 256 x 4K: round 163.
source "$(dirname "$0")/device_setup.sh"
timeout 220 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_gemm_side_gpu.py \
  tests/gpu/test_moe_gluon_gpu.py tests/gpu/test_batch_invariance_gpu.py \
  tests/gpu/test_shared_expert_gpu.py tests/gpu/test_model_gpu.py \
  -k "align or w4a16_prefill or swiglu or shared or invariant or model" \
  >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -6
timeout 290 python3 bench/prefill.py --prompt-lens 4096 --batch-prompts 8 --repeats 2 \
  --no-eager --host-phases --op-stacks --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_4k.log"
sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" | cut -c1-150 \
  | grep -E "^\| [0-9]|GPU busy|family|^\| (routed|dense|attention|indexer|rest)" | head -30
sed -n '/^torch ops of one prefill/,/^$/p' "$OUT/prefill_4k.log" | cut -c1-220 | head -12
rm -f "$OUT/install.log"
