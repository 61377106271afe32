#!/usr/bin/env bash
# Device round 205 (session 41), part a (≈ 5 min): GPU checks of this session's two changes —
# the gated expert GEMM with the SwiGLU as its epilogue (bit for bit against two GEMMs and
# swiglu_fake_q8_slots, every part fill; the pipeline's bits by kernel) and the small-output
# linear tiles (accuracy, a row's bits at 1K / 4K rows) — then the indexer head weights'
# tilings (route_compress.py heads:*, --pick into $OUT/heads_flags). Part b: h200_round205b.sh.
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 330 python3 -m pytest -p no:cacheprovider -m gpu -rf -q -s tests/gpu/test_moe_gluon_gpu.py \
  tests/gpu/test_gemm_side_gpu.py -k "gated_swiglu or w4a16_prefill_pipeline or small_out" \
  >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^\| w4a16 gated|small out|^(FAILED|ERROR)|passed|failed" \
  "$OUT/gpu.log" | cut -c1-150 | tail -14
HEADS="heads:default,heads:64:64:32:4:4:1,heads:64:64:32:4:4:2,heads:64:64:32:4:4:4"
HEADS="$HEADS,heads:64:64:32:4:4:8,heads:64:128:32:4:4:4,heads:64:64:32:4:3:4,heads:default"
timeout 150 python3 bench/route_compress.py --variants "$HEADS" >"$OUT/heads.log" 2>&1
echo "heads rc=$?"; grep -E "^\| heads|bf16" "$OUT/heads.log" | cut -c1-120
python3 bench/route_compress.py --pick "$OUT/heads.log" | tr ' ' '\n' | grep SMALL_O \
  | sed 's/^/--launch-constant /' | tr '\n' ' ' >"$OUT/heads_flags"
echo "heads flags: $(cat "$OUT/heads_flags")"
rm -f "$OUT/install.log"
