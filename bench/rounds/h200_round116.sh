#!/usr/bin/env bash
# Device round 116 (prepared in session 20, not run): round 115 again on the fixed paired down
# launch (DECODE_PAIRED: round 115a ran commit dc515e7, whose steady-state TMA read w1's rows
# for the second operand — wrong outputs, an optimistic timing). Its GPU checks (the paired
# case included), the GEMMs alone interleaved, decode 64 / 256 x 32K paired / not (≈ 5 min).
# If the checks pass and paired is faster, make moe_gluon_w4a8.DECODE_PAIRED the default.
exec bash "$(dirname "$0")/h200_round115.sh"
