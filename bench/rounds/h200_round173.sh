#!/usr/bin/env bash
# Device round 173 (session 34; after round 171, before 172) (≈ 4 min): the prefill expert
# GEMM's eighths (PARTS 8: a block at N = its used eighths of BM 128 — 64 + 16 for 65-80
# pairs instead of 64 + 32; ``moe_gluon_w4a16_prefill.part_tiles``), prepared without a GPU
# (compiled for sm_90 only) —
#   * GPU checks: parts 8 on both kernels against parts 4, routing whose last blocks take every
#     eighth fill (bits, every row written, the reference's values), and the pipeline;
#   * bench/moe_gluon_prefill.py at the 4K shape (ws, one warpgroup of two fragments) and the
#     8K shape (base, two warpgroups of one), parts 4 / 8 / 4 / 8 (bits against the first row).
# Round 172 timed the lone 4K prompt with them (session 35, an H100: +0.1 %, level). Expected
# (bench/moe_parts_padding.py): the rows multiplied at 4K fall from 1.24 to 1.12 times the
# pairs (8K: 1.12 to 1.07). Session 34's wgmma turns (checked and timed here before) were
# removed in session 35 (round 172: +4.6 %). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 170 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_moe_gluon_gpu.py -k "eighths or pipeline_matches" \
  >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -4
grep -E "^\| w4a16 prefill eighths" "$OUT/gpu.log" | cut -c1-110
MOE4=(--tokens 4096 --bm 256 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 1
      --w4a16-rep 2 --w4a16-kernel ws --w4a16-parts 4 8 4 8)  # --bm 256: no FP8 rows
timeout 100 python3 bench/moe_gluon_prefill.py "${MOE4[@]}" >"$OUT/moe4k_parts.log" 2>&1
echo "moe 4K parts rc=$?"; grep -E "^\| 4096 \| w4a16|bit-identical" "$OUT/moe4k_parts.log" \
  | cut -c1-120 | head -16
MOE8=(--tokens 8192 --bm 256 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2
      --w4a16-rep 1 --w4a16-kernel base --w4a16-parts 4 8 4 8)
timeout 100 python3 bench/moe_gluon_prefill.py "${MOE8[@]}" >"$OUT/moe8k_parts.log" 2>&1
echo "moe 8K parts rc=$?"; grep -E "^\| 8192 \| w4a16|bit-identical" "$OUT/moe8k_parts.log" \
  | cut -c1-120 | head -16
rm -f "$OUT/install.log"
