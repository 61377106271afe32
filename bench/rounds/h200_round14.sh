#!/usr/bin/env bash
# Device round 14 (one call, ≈ 8 min): the A_BF16 expert tiles (activations and h as rounded bf16
# values instead of e4m3 codes + scales: no per-program decode of A, 14 % fewer instructions in
# the decode K loop) — their GPU accuracy, the decode/prefill tilings with and without them
# (bench/moe_decode.py), decode at batch 64 and 256 / 4K with the fastest decode tiling — and the
# eager torch reference's full 4K prefill (the issue's baseline; 512-token probe: 17.8 s).
source "$(dirname "$0")/../device_setup.sh"
timeout 120 python3 -m pytest -q -s -p no:cacheprovider -m gpu -rf \
  tests/gpu/test_gemm_side_gpu.py -k "moe_experts_accuracy" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\| moe|passed|failed" "$OUT/gpu_tests.log" | tail -10
for n in 64 4096; do
  timeout 140 python3 bench/moe_decode.py --tokens $n --config-tokens $n >"$OUT/moe_$n.log" 2>&1
  echo "moe $n rc=$?"; grep -A30 "W4A16 tilings" "$OUT/moe_$n.log"
done
MOE_DECODE=$(python3 bench/pick_fastest.py "$OUT/moe_64.log" | grep x)
MOE_PREFILL=$(python3 bench/pick_fastest.py "$OUT/moe_4096.log" | grep x)
echo "MOE_DECODE=$MOE_DECODE MOE_PREFILL=$MOE_PREFILL"
timeout 150 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 --no-eager \
  --no-profile ${MOE_DECODE:+--moe-config $MOE_DECODE} >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -12
timeout 250 python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 --eager-budget-s 200 \
  --no-profile --repeats 2 ${MOE_PREFILL:+--moe-config $MOE_PREFILL} >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -12
rm -f "$OUT/install.log"
