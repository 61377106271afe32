#!/usr/bin/env bash
# Device round 17 (one call, ≈ 5 min; not yet run): the expert kernels' GPU checks (the default
# unpack asm changed after round 16: emulated bit-exact on CPU), the decode attention's configs
# (bench/attention_decode.py: row splits — flash-decoding with a merge kernel —, output splits,
# warps; at 64 and 256 queries), the attention GPU checks incl. row splits, then decode at
# 64 / 256 x 4K and 256 x 32K with the fastest (bench/kernel_overrides.py
# --attention-config decode:...; not a default until measured).
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu/test_attention_side_gpu.py \
  tests/gpu/test_gemm_side_gpu.py -k "sparse_attention or moe" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -6
for n in 64 256; do
  timeout 90 python3 bench/attention_decode.py --queries $n --context 4096 >"$OUT/attn_$n.log" 2>&1
  echo "attention decode $n rc=$?"; grep "^|\|ceiling" "$OUT/attn_$n.log"
done
ATTN=$(python3 bench/pick_fastest.py "$OUT/attn_64.log" | grep :)
echo "ATTN_DECODE=decode:$ATTN"
timeout 200 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
  --no-eager --no-profile ${ATTN:+--attention-config decode:$ATTN} >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -12
rm -f "$OUT/install.log"
