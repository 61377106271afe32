#!/usr/bin/env bash
# Device round 176 (session 35; for the next session) (≈ 5 min): what decides the next defaults
# and reads the op-stacks census, in one call —
#   * the eighths' GPU bit checks (PARTS 8 on both prefill expert kernels against parts 4,
#     routing whose last blocks take every eighth fill; the pipeline): round 175 timed the
#     eighths 1.5-3.1 % faster per expert pipeline at 4K, bit-identical there; turn
#     ``moe_gluon_w4a16_prefill.PARTS`` 8 on by default if these pass;
#   * a lone 4K prompt with --op-stacks (its table's frames, or the frame census where none
#     matched: round 170 matched none on the device; ``bench_common.op_table`` now also reads
#     an op's own ``stack``).
# Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
timeout 170 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_moe_gluon_gpu.py -k "eighths or pipeline_matches" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -4
grep -E "^\| w4a16 prefill eighths" "$OUT/gpu.log" | cut -c1-110
timeout 150 python3 bench/prefill.py --prompt-lens 4096 --repeats 1 --no-eager --no-profile \
  --op-stacks --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_4k.log"
grep -E "^no frame matched" "$OUT/prefill_4k.log" | cut -c1-900
grep -A16 -E "^torch ops of one prefill" "$OUT/prefill_4k.log" | cut -c1-240
rm -f "$OUT/install.log"
