#!/usr/bin/env bash
# Device round 182 (session 37) (≈ 3 min): the lone 4K prompt with the prefill expert GEMM's
# program shapes re-checked now that PARTS 8 is the default (the choices were made at PARTS 4,
# sessions 27-28): REP 2 on one warpgroup with its TMA on a producer warp (the default: up to
# 64 pairs per expert, KERNEL auto -> ws), the same REP 2 programs on the base kernel, and two
# warpgroups of one fragment (REP off), interleaved 4 rounds, tokens compared.
# Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
prefill_ab_4k 4 "s36=--w4a16-rep-max-pairs 64 --w4a16-kernel auto" \
  "rep2base=--w4a16-rep-max-pairs 64 --w4a16-kernel base" \
  "rep0=--w4a16-rep-max-pairs 0 --w4a16-kernel auto"
rm -f "$OUT/install.log"
