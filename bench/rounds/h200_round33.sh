#!/usr/bin/env bash
# Device round 33 (≈ 5 min): the TileLang W4A16 probe (bench/tilelang_moe_probe.py) on the H200
# for the first time — correctness against torch and GB/s of the expert weights, down and gated,
# 64 and 256 tokens, with and without warp specialization — then the Triton expert GEMMs of
# bench/moe_decode.py at the same sizes in the same run, for the comparison.
# Carry tlsite.tar.xz (tilelang 0.1.15 + z3-solver + apache-tvm-ffi + torch-c-dlpack-ext for
# cp312, unzipped and xz'd here: 78.7 MiB of wheels do not fit one call); no Triton cache.
source "$(dirname "$0")/../device_setup.sh"
mkdir -p /tmp/tlsite && xz -dc tlsite.tar.xz | tar -xf - -C /tmp/tlsite || exit 1
export PYTHONPATH=/tmp/tlsite${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import tilelang, torch; print('tilelang', tilelang.__version__, 'torch', torch.__version__)" \
  2>&1 | tail -3
for what in "" "--gated"; do
  for ws in "--no-ws" ""; do
    for tokens in 64 256; do
      echo "== probe ${what:-down} ${ws:-ws} $tokens"
      timeout 120 python3 bench/tilelang_moe_probe.py --check $what $ws --tokens "$tokens" \
        >"$OUT/probe.log" 2>&1
      echo "rc=$?"; grep -vE "^(USDT|Warning|  warn)" "$OUT/probe.log" | tail -3
    done
  done
done
timeout 200 python3 bench/moe_decode.py --tokens 64 256 --config-tokens 0 >"$OUT/moe_decode.log" 2>&1
echo "moe_decode rc=$?"; grep -E "^\|" "$OUT/moe_decode.log" | head -14
rm -f "$OUT/install.log"
