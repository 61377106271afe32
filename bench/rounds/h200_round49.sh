#!/usr/bin/env bash
# Device round 49 (session 12): the prefill projections' tiling, and the prefill with the shared
# expert on the dense kernels at every row count (round 48a's A/B made the default). Carry the
# triton-cache parts.
#   PART=a (≈ 4 min): bench/gemm_prefill_choice.py --bf16-configs at 4096 rows (the 4K chunk:
#     the bf16_decode path's tile against BM 256 / BN 256 / BK 32-128 / stages), then
#     bench/prefill.py at the defaults with a profile.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 260 python3 bench/gemm_prefill_choice.py --rows 4096 --bf16-configs \
"128x128x64:3:8,128x128x64:4:8,128x256x64:3:8,256x128x64:3:8,128x128x32:4:8,128x256x32:4:8,\
256x128x32:4:8,64x256x64:3:4,128x128x128:2:8" >"$OUT/gemm_prefill.log" 2>&1
  echo "gemm_prefill rc=$?"; sed -n '/^All shapes/,$p' "$OUT/gemm_prefill.log"
  grep -E "failed" "$OUT/gemm_prefill.log" | head -5
  timeout 200 python3 bench/prefill.py --out "$OUT" --no-eager >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | head -24 ;;
esac
rm -f "$OUT/install.log"
