#!/usr/bin/env bash
# Device round 191 (session 39) (≈ 5 min): the bisection top-k (kernels/triton/topk_bisect.py)
# — its GPU checks against the reference (a 4K prompt's causal rows at ratio 2 and 1, ties and
# distinct; decode shapes), the kernel alone against the radix one at prefill and decode shapes
# (to place topk_bisect.MIN_ROWS), the MoE align's chunk size at prefill sizes, and the lone 4K
# prompt (families, kernel table: _bisect_topk_kernel in place of _radix_topk_kernel).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -q -p no:warnings tests/gpu/test_attention_side_gpu.py -k "topk" \
  >"$OUT/gpu.log" 2>&1
echo "gpu topk tests rc=$?"; tail -3 "$OUT/gpu.log"
grep -E "topk_positions" "$OUT/gpu.log" | head -12
for args in "--rows 4096 --entries 2048 --causal 2" "--rows 4096 --entries 2048 --causal 2 --ties" \
            "--rows 4096 --entries 4096 --causal 1" \
            "--rows 1 8 64 256 512 1024 --entries 1024 2048"; do
  timeout 90 python3 bench/topk_decode.py $args --variants 8:4096:8 >>"$OUT/topk.log" 2>&1
  echo "topk_decode $args rc=$?"
done
grep -E "^\| [0-9]" "$OUT/topk.log" | grep -v " stage " | cut -c1-110
timeout 60 python3 bench/moe_align.py --tokens 2048 4096 8192 --block-m 128 \
  --variants 8192:4096 8192:2048 8192:1024 8192:512 >"$OUT/align.log" 2>&1
echo "moe_align rc=$?"; grep -E "^\|" "$OUT/align.log" | head -16
timeout 200 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --out "$OUT" \
  >"$OUT/prefill_4k.log" 2>&1
echo "prefill 4K rc=$?"
grep -E "^prefill 4096|GPU busy|^\| 4096|^\| (routed|dense|attention|indexer|rest)|topk|_chunk_" \
  "$OUT/prefill_4k.log" | cut -c1-150 | head -20
rm -f "$OUT/install.log"
