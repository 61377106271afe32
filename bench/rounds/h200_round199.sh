#!/usr/bin/env bash
# Device round 199 (session 40) (≈ 6 min): the GPU checks of this session's changed launches
# (the router's scores at 128 experts a program, the promoted projections on 64 x 128 tiles,
# the keys-on-M index scores, the index / top-k rows invariance), then the lone 4K prompt in
# session 39's final tree (carry ab-base.tar = `git archive 0305896`) and in this one,
# interleaved base / new / base / new, each with its host phases (this session's worker
# enqueues an idle step inline). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_gemm_side_gpu.py \
  tests/gpu/test_attention_side_gpu.py tests/gpu/test_batch_invariance_gpu.py \
  -k "route or promoted or index_scores or topk_rows" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -4
prefill_ab_interleaved "--prompt-lens 4096 --repeats 5 --no-eager --no-profile --host-phases"
for f in "$OUT"/prefill_*_2.log; do
  echo "$f"; sed -n '/^host phases (ms/,/generate done/p' "$f" | grep -E \
    "engine inputs|enqueue starts|thread runs|backbone enqueue$|layer 0 ffn|backbone enqueued|generate done"
done
rm -f "$OUT/install.log"
