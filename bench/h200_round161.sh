#!/usr/bin/env bash
# Device round 161 (prepared in session 28, not run: the device time was spent): session 28's
# defaults end to end — the prefill expert GEMM checks (base / ws / auto bits), the
# batch-invariance checks, the tiny model's GPU checks (its small expert shapes on auto), a
# lone 4K prompt and 8 x 4K in one generate with both kernel tables and their tables by family
# (prefill_families: η per family), decode 64 / 256 x 4K (the decode path did not change: a
# check) (≈ 8 min). Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
timeout 260 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_moe_gluon_gpu.py \
  tests/gpu/test_batch_invariance_gpu.py tests/gpu/test_model_gpu.py \
  -k "w4a16_prefill or invariant or model" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -6
timeout 260 python3 bench/prefill.py --prompt-lens 4096 --batch-prompts 8 --repeats 3 \
  --no-eager --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_4k.log"
sed -n '/^## prefill/,$p' "$OUT/prefill_4k.log" | grep -v "^USDT" | cut -c1-150 \
  | grep -E "^\| [0-9]|GPU busy|family|^\| (routed|dense|attention|indexer|rest)" | head -30
timeout 110 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 --no-eager \
  --no-profile >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -9
rm -f "$OUT/install.log"
