#!/usr/bin/env bash
# Device round 170 (session 33; run it before rounds 167 / 168) (≈ 8 min):
#   * the GPU checks round 166 did not reach or that changed after it: the five top-k checks
#     of test_attention_side_gpu.py (its pytest hit the time limit) and test_mhc_norm_gpu.py's
#     hc_expand_norm check, relaxed in session 32 (y within one bf16 step plus the terms' fp32
#     rounding of hc_expand's, h checked on the kernel's own y); session 33's first site on
#     stride-0 streams (hc_coeffs and hc_expand_norm on the embedding's view: the copy's bits,
#     both timed); the engram table's one-launch row gather (kernels/triton/engram_rows.py,
#     also on by default: the bits of the torch gather, both timed);
#   * a lone 4K prompt: host phases with session 33's marks inside layers 0 and 1 (attention,
#     window keys, the window layout's first build, FFN: where layer 0's extra 2.7 ms of
#     enqueue goes), the same behind a 150 ms GPU spin (fixed in session 32: generate right
#     behind the spin), and --op-stacks with frames matched by package path (round 166 printed
#     "?" for every op);
#   * a 16K prompt (8K chunks) with its kernel table by family: the issue's second prefill
#     length, last measured in session 21 (394 ms).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 220 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_attention_side_gpu.py tests/gpu/test_mhc_norm_gpu.py \
  tests/gpu/test_gemm_side_gpu.py -k "topk or expand_norm or stride0 or engram_rows" \
  >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -8
grep -E "^\| (hc_expand_norm|expand|  \.\.\. \+ q8|first site|engram)" "$OUT/gpu.log" \
  | cut -c1-120
timeout 170 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --host-phases \
  --host-phases-held 150 --op-stacks --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_4k.log"
sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" | cut -c1-150 \
  | grep -E "GPU busy|^\| (routed|dense|attention|indexer|rest)" | head -8
sed -n '/^host phases (ms/,/generate done/p' "$OUT/prefill_4k.log"
sed -n '/^host phases with the GPU held/,/generate done/p' "$OUT/prefill_4k.log"
grep -E "^no frame matched" "$OUT/prefill_4k.log" | cut -c1-400
grep -A16 -E "^torch ops of one prefill" "$OUT/prefill_4k.log" | cut -c1-240
timeout 150 python3 bench/prefill.py --prompt-lens 16384 --repeats 2 --no-eager \
  --out "$OUT" >"$OUT/prefill_16k.log" 2>&1
echo "prefill 16K rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_16k.log"
sed -n '/^## prefill/,$p' "$OUT/prefill_16k.log" | grep -v "^USDT" | cut -c1-150 \
  | grep -E "^\| 16384|GPU busy|^\| (routed|dense|attention|indexer|rest)|own floors" | head -9
rm -f "$OUT/install.log"
