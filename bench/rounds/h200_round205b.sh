#!/usr/bin/env bash
# Device round 205, part b (≈ 4 min): the lone 4K prompt, interleaved in one process — the
# gated GEMM and the SwiGLU apart (two GEMMs + swiglu_fake_q8_slots, as before this session),
# fused, and fused with the small-output tiles at part a's pick (HEADS_FLAGS, the
# --launch-constant flags part a printed; SMALL_O_MAX_OUT 0 in the other two). Pass the commit
# hash and HEADS_FLAGS literally.
source "$(dirname "$0")/../device_setup.sh"
OFF=$(echo "$HEADS_FLAGS" | sed 's/SMALL_O_MAX_OUT=[0-9]*/SMALL_O_MAX_OUT=0/')
prefill_ab_4k 3 "apart=--w4a16-fused-swiglu 0 $OFF" "fused=--w4a16-fused-swiglu 1 $OFF" \
  "fused_heads=--w4a16-fused-swiglu 1 $HEADS_FLAGS"
rm -f "$OUT/install.log"
