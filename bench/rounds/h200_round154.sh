#!/usr/bin/env bash
# Device round 154 (session 27): the prefill expert GEMM on one warpgroup of two A fragments
# (REP 2) up to 64 pairs per expert, now the pipeline's default there (round 153: 4-9 % faster
# at 1K / 4K, slower at 8K) — GPU checks (REP 2 forced vs 1 in the pipeline: the same bits),
# the GEMMs at 1K / 2K (BM 64, the engine's there) and 4K twice (BM 128): 2 x 64 rows vs
# 1 x 64 vs 1 x 128 (REP 2), and one lone 4K
# prompt end to end with the new default (≈ 4 min). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_moe_gluon_gpu.py \
  -k "w4a16_prefill" >"$OUT/gpu_rep.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_rep.log" | tail -4
# the engine's block sizes: BM 64 up to 32 pairs per expert (1K / 2K tokens), 128 above
n=0
for run in "1024 2048:64" "4096:128" "4096:128"; do
  toks=${run%%:*}; bm=${run##*:}; n=$((n + 1))
  timeout 100 python3 bench/moe_gluon_prefill.py --tokens $toks --bm 128 --warpgroups 2 \
    --w4a16-bm $bm --w4a16-stages 2 --w4a16-wg 2 1 --w4a16-parts 4 --w4a16-rep 1 2 \
    --skip-triton >"$OUT/moe_rep_$n.log" 2>&1
  echo "bench $toks BM $bm rc=$?"; grep -E "^\| [0-9]|False|Error" "$OUT/moe_rep_$n.log" \
    | grep -v "all launches" | cut -d'|' -f2,3,6,7
done
timeout 150 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --out "$OUT" \
  >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" \
  | cut -c1-150 | head -16
rm -f "$OUT/install.log"
