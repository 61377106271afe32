#!/usr/bin/env bash
# Device round 163 (prepared in sessions 29-30, not run) (≈ 8 min; pass the commit hash
# literally):
#   * session 30's site kernels alone: hc_expand_norm (y the expand kernel's bits, h within a
#     bf16 step of the three kernels, hq the quantizer's bits, rows batch-invariant; timed
#     against the separate kernels at 1 / 64 / 4096 rows), the site probe mhc_site against
#     hc_expand_norm + hc_coeffs (adopt it only if it wins at 64 and 4096), the compressor's
#     promoted projections (the fp32-x path's bits, timed); rms_norm_q8 (rms_norm's bits and
#     the quantizer's bits of them, timed against the two ops); the engram injection on the
#     bf16 projection output (its fp32 copy's bits);
#   * decode 64 / 256 x 4K (each block's graph drops ~6 launches: the sites' collapses, norms
#     and per-projection Q8_32 roundings; the reusing layers share their source's entry rows:
#     21 launches fewer a step; launch arithmetic in plain Python);
#   * bench/moe_align.py (µs per call in CUDA graphs and host µs, the one-program and chunked
#     paths against the torch version at 1 .. 32K tokens, MAX_PAIRS:CHUNK variants: where the
#     chunks should take over);
#   * chunk_check of an 8K prompt in 8,192 / 2,048 / 1,024 chunks (the chunked align path at
#     2K and 8K chunks, the window rows from their records: tokens and logprobs bit-identical
#     across chunkings).
source "$(dirname "$0")/device_setup.sh"
timeout 100 python3 -m pytest -p no:cacheprovider -q -m gpu -s tests/gpu/test_mhc_norm_gpu.py \
  tests/gpu/test_gemm_side_gpu.py -k "expand_norm or site_probe or promoted or norm_q8 or engram_and_norm" \
  >"$OUT/gpu_sites.log" 2>&1
echo "site checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_sites.log" | tail -4
grep -E "^\| (hc_expand_norm|expand|  \.\.\. \+ q8|linear promoted|linear x\.float|hc_site|rms_norm)" \
  "$OUT/gpu_sites.log" | cut -c1-120
timeout 120 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 --no-eager \
  --no-profile >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -9
timeout 120 python3 bench/moe_align.py >"$OUT/moe_align.log" 2>&1
echo "moe_align rc=$?"; grep -E "^\|" "$OUT/moe_align.log" | cut -c1-110 | head -52
timeout 150 python3 bench/chunk_check.py --prompt-len 8192 --chunks 8192,2048,1024 \
  --prompts 1 --out /tmp/j >"$OUT/chunk8k.log" 2>&1
echo "chunk check rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk8k.log" | grep "^| [0-9]"
rm -f "$OUT/install.log"
