#!/usr/bin/env bash
# Device round 222 (session 45) (≈ 5 min): round 217's attention checks (the pairs kernel, at
# 64-channel heads too) and round 218's Nsight Compute on the 4K expert pipeline (HBM, L2
# bytes and hit rate, shared, tensor, issue, stalls) — round 219's two parts, run through it.
# Pass the commit hash literally.
bash "$(dirname "$0")/h200_round219.sh"
