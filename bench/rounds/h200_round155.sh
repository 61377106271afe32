#!/usr/bin/env bash
# Device round 155 (session 28): session 27's REP 2 default (one warpgroup of two A fragments
# up to 64 pairs per expert, two-warpgroup programs above) end to end — the batch-invariance
# GPU checks, chunk_check of 8K prompts in 8,192 / 4,096 / 2,048 / 1,024 chunks (REP 1 at 8K
# against REP 2 below: tokens and logprobs must be bit-identical), then a lone 4K prompt and
# 8 x 4K in one generate with both kernel tables, the lone prompt's host phases and its host
# syncs (≈ 7 min). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
  tests/gpu/test_batch_invariance_gpu.py >"$OUT/tests_invariance.log" 2>&1
echo "invariance checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests_invariance.log" | tail -4
mkdir -p /tmp/j
timeout 170 python3 bench/chunk_check.py --prompt-len 8192 --chunks 8192,4096,2048,1024 \
  --prompts 2 --out /tmp/j >"$OUT/chunk8k.log" 2>&1
echo "chunk check rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk8k.log" | head -12
timeout 260 python3 bench/prefill.py --prompt-lens 4096 --batch-prompts 8 --repeats 3 \
  --no-eager --host-phases --sync-sites --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_4k.log"
sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" | cut -c1-150 \
  | grep -E "^\| [0-9]|GPU busy|^\| .(_w4a16|_linear_wide|_attn)|idle|host phases|^  +[0-9]|sync" \
  | head -60
rm -f "$OUT/install.log"
