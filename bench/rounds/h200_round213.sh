#!/usr/bin/env bash
# Device round 213 (session 42, prepared; not yet run) (≈ 5 min): the lone 4K prompt with the
# gated GEMM's SwiGLU epilogue (EPI_MODE: moe_swiglu_epilogue.MODE, 3 quads or 4 octets — the
# default; since session 43 fused with octets is the engine's default) against the two GEMMs +
# SwiGLU apart (prefill_ab, 3 rounds; the check tokens compared). Pass the commit hash
# literally.
source "$(dirname "$0")/../device_setup.sh"
prefill_ab_4k 3 "apart=--w4a16-fused-swiglu 0" \
  "fused=--w4a16-fused-swiglu 1 --launch-constant moe_swiglu_epilogue.MODE=${EPI_MODE:-4}"
rm -f "$OUT/install.log"
