#!/usr/bin/env bash
# Device round 177 (session 36) (≈ 9 min): what decides the next defaults, in one call —
#   * the eighths' GPU bit checks (PARTS 8 on both prefill expert kernels against parts 4,
#     routing whose last blocks take every eighth fill; the pipeline): round 175 timed the
#     eighths 1.5-3.1 % faster per expert pipeline at 4K, bit-identical there; turn
#     ``moe_gluon_w4a16_prefill.PARTS`` 8 on by default if these pass;
#   * linear_wide with a step's wgmmas issued before its barrier and TMA refill (MMA_FIRST: the
#     sm_90 loop's instructions outside the wgmmas' shadow 123 -> 84 a warp at the 4K launch)
#     and with two A fragments per warpgroup (REP 2, 128-row token tiles: 0.8x the L2 bytes per
#     FLOP of the 4K default, two warpgroups x 64 weight rows against 256 tokens): their bits
#     against the default order / REP 1, then the seven projections at 4,096 rows — the default
#     launch (gl, first and again late), with MMA_FIRST, REP 2 on two (and MMA_FIRST) / one
#     warpgroups, the warp-specialized kernel at 256-row tiles (never timed at prefill rows);
#   * the lone 4K prompt end to end with either / both (bench/prefill_ab.py, 3 rounds);
#   * a lone 4K prompt with --op-stacks (its table's frames, or the frame census where none
#     matched: round 170 matched none on the device).
# Ran in session 36 at commit 84141eb (an H100). REP 2 (`:r2`, --linear-wide-rep2) was removed
# after it (it lost): rerun at that commit.
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_moe_gluon_gpu.py tests/gpu/test_linear_wide_gpu.py \
  -k "eighths or pipeline_matches or two_fragments or prefill_rows" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -6
grep -E "^\| (w4a16 prefill eighths|linear_wide (REP2|default))" "$OUT/gpu.log" | cut -c1-120
timeout 120 python3 bench/gemm_decode.py --rows 4096 --variants \
  gl,gl:2:256:64:4:w1:first,gl:2:128:64:4:w1:r2,gl:2:128:64:4:w1:r2:first,gl:1:128:64:4:w1:r2,glws:256:64:3:w1,gl,gl:2:256:64:4:w1:first \
  >"$OUT/gemm4k.log" 2>&1
echo "gemm_decode rc=$?"; grep -E "^\|" "$OUT/gemm4k.log" | cut -c1-150 | head -60
# the lone 4K prompt end to end: off / MMA_FIRST / REP 2 / both, interleaved (bits compared)
prefill_ab_4k 3 "off=--linear-wide-mma-first 0 --linear-wide-rep2 0" \
  "first=--linear-wide-mma-first 1 --linear-wide-rep2 0" \
  "rep2=--linear-wide-mma-first 0 --linear-wide-rep2 1" \
  "both=--linear-wide-mma-first 1 --linear-wide-rep2 1"
timeout 150 python3 bench/prefill.py --prompt-lens 4096 --repeats 1 --no-eager --no-profile \
  --op-stacks --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_4k.log"
grep -E "^no frame matched" "$OUT/prefill_4k.log" | cut -c1-900
grep -A16 -E "^torch ops of one prefill" "$OUT/prefill_4k.log" | cut -c1-240
rm -f "$OUT/install.log"
