#!/usr/bin/env bash
# Device round 112 (session 20): the W4A8 kernel order in step tiles (every expert stack; the
# decode GEMM, both prefill GEMMs and the conversion read it) — PART=a: the GPU checks of the
# expert kernels and the model, the decode GEMMs alone (≈ 4 min); PART=b: decode 64 / 256 x
# 32K and the 4K prefill, this tree against commit 7dc384d (row-major order) on the same
# machine, interleaved (carry ab-base.tar = `git archive 7dc384d`; ≈ 7 min).
source "$(dirname "$0")/../device_setup.sh"
decode_row() {  # $1: label, $2: log, $3: JSON dir; runs from the current directory
  timeout 150 python3 bench/decode.py --batches 64,256 --contexts 32768 --no-eager \
    --no-profile --out "$3" >"$2" 2>&1
  echo "decode $1 rc=$?"; sed -n '/^## decode/,$p' "$2" | grep -E "^\| (64|256) \|"
}
prefill_row() {
  timeout 120 python3 bench/prefill.py --prompt-lens 4096 --no-eager --out "$3" >"$2" 2>&1
  echo "prefill $1 rc=$?"; grep -E "^\| 4096 \|" "$2" | head -2
}
case "${PART:-a}" in
a)
  timeout 240 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_moe_gluon_gpu.py \
    tests/gpu/test_model_gpu.py >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -6
  timeout 200 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
    >"$OUT/moe.log" 2>&1
  echo "moe rc=$?"; grep -E "w4a8|ceiling" "$OUT/moe.log" | head -12 ;;
b)
  ab_base_tree ab-base.tar || exit 1
  mkdir -p /tmp/ab/json
  # logs in $OUT, JSON of this tree's first runs only ($OUT sends back at most 8 files)
  decode_row tiles "$OUT/decode_tiles1.log" "$OUT"
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH decode_row rowmajor "$OUT/decode_base.log" /tmp/ab/json)
  decode_row tiles "$OUT/decode_tiles2.log" /tmp/ab/json
  prefill_row tiles "$OUT/prefill_tiles.log" "$OUT"
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH prefill_row rowmajor "$OUT/prefill_base.log" /tmp/ab/json) ;;
esac
rm -f "$OUT/install.log"
