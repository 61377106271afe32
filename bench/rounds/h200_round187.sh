#!/usr/bin/env bash
# Device round 187 (session 38) (≈ 6-7 min): the memory-bound kernels' launch configs again,
# timed as back-to-back calls (bench/rest_kernels.py; round 185's one call between events
# counted the Python launch), with rms_apply on its own tile (APPLY_BLOCK_D); then the lone 4K
# prompt end to end (prefill.py: families, kernel table, idle gaps) with the fastest configs
# as --launch-constant flags (the defaults where none beats them by 3 %); hc_coeffs' fixed
# split at 4K (bench/mhc_prefill.py: 8, the default, against 16 and 4).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 bench/rest_kernels.py --kernels expand_norm rms_apply swiglu gather combine \
  >"$OUT/rest.log" 2>&1
echo "rest_kernels rc=$?"; grep -E "^\||ceiling" "$OUT/rest.log" | grep -v "^|---"
PICK=$(python3 bench/rest_kernels.py --pick "$OUT/rest.log")
echo "picked: $PICK"
# shellcheck disable=SC2086
timeout 260 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager $PICK \
  --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill 4K rc=$?"
grep -E "^prefill 4096|GPU busy|^\| 4096|^\| (routed|dense|attention|indexer|rest)|_hc_expand_collapse|_rms_apply|_swiglu_slots|_gather_tokens|_moe_combine|_hc_coeffs" \
  "$OUT/prefill_4k.log" | cut -c1-150 | head -24
timeout 60 python3 bench/mhc_prefill.py --tokens 4096 \
  --variants "default,64:64:4:4:528:bf16x3:3:16,64:64:4:4:528:bf16x3:3:4" >"$OUT/mhc.log" 2>&1
echo "mhc_prefill rc=$?"; grep -E "^\| 4096" "$OUT/mhc.log"
rm -f "$OUT/install.log"
