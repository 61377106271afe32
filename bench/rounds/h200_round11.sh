#!/usr/bin/env bash
# Device round 11 (one call, ≈ 5–8 min: give it the full 600 s): measurements of the session-5
# changes not yet measured — the indexer's float-key layout and tiling (bench/index_prefill.py),
# the mHC coefficients' split-K target (bench/mhc_prefill.py), the dense FP8 projections as FP8
# wgmma with per-32 promotion vs bf16 wgmma on the weight decoded in-kernel
# (bench/gemm_prefill_choice.py, never run yet), the W4A16 expert kernel's tilings incl. the
# swapped-operand (SWAP_AB) tiles at 64 and 4,096 tokens (bench/moe_decode.py --config-tokens).
# Prints the fastest expert tilings last: pass them to round 12 (MOE_DECODE=..., MOE_PREFILL=...).
source "$(dirname "$0")/../device_setup.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
sweep() {  # NAME [ARGS...]: one bench, its log in $OUT, its table printed
  timeout ${SWEEP_TIMEOUT:-70} python3 "bench/$1.py" "${@:2}" >"$OUT/$1.log" 2>&1
  echo "$1 rc=$?"; grep "^|\|ceiling" "$OUT/$1.log"
}
sweep index_prefill
sweep mhc_prefill
sweep gemm_prefill_choice --rows 4096
for n in 64 4096; do
  timeout ${MOE_TIMEOUT:-140} python3 bench/moe_decode.py --tokens $n --config-tokens $n \
    >"$OUT/moe_$n.log" 2>&1
  echo "moe $n rc=$?"; tail -16 "$OUT/moe_$n.log"
done
echo "MOE_DECODE=$(python3 bench/pick_fastest.py "$OUT/moe_64.log" | grep x)" \
  "MOE_PREFILL=$(python3 bench/pick_fastest.py "$OUT/moe_4096.log" | grep x)"
rm -f "$OUT/install.log"
