#!/usr/bin/env bash
# Device round 213 (prepared in session 42, rewritten in session 43; not yet run) (≈ 5 min): the
# lone 4K prompt with the gated expert GEMM's SwiGLU as its epilogue (the octet layout; the
# engine's default since session 43) against the two GEMMs + SwiGLU apart (prefill_ab, 3 rounds;
# the check tokens compared). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
prefill_ab_4k 3 "apart=--w4a16-fused-swiglu 0" "fused=--w4a16-fused-swiglu 1"
rm -f "$OUT/install.log"
