#!/usr/bin/env bash
# Device round 154 (session 27): the prefill expert GEMM on one warpgroup of two A fragments
# (REP 2) up to 64 pairs per expert, now the pipeline's default there (round 153: 4-9 % faster
# at 1K / 4K, slower at 8K) — GPU checks (REP 2 forced vs 1 in the pipeline: the same bits),
# the GEMMs at 2K / 4K twice (2 x 64 rows vs 1 x 128 rows vs 1 x 64 rows), and one lone 4K
# prompt end to end with the new default (≈ 4 min). Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_moe_gluon_gpu.py \
  -k "w4a16_prefill" >"$OUT/gpu_rep.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_rep.log" | tail -4
for i in 1 2; do
  timeout 100 python3 bench/moe_gluon_prefill.py --tokens 2048 4096 --bm 128 --warpgroups 2 \
    --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 1 --w4a16-parts 4 --w4a16-rep 1 2 \
    --skip-triton >"$OUT/moe_rep_$i.log" 2>&1
  echo "bench $i rc=$?"; grep -E "^\| [0-9]|False|Error" "$OUT/moe_rep_$i.log" | grep -v "all launches" \
    | cut -d'|' -f2,3,6,7
done
timeout 150 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --out "$OUT" \
  >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" \
  | cut -c1-150 | head -16
rm -f "$OUT/install.log"
