#!/usr/bin/env bash
# Device round 233 (session 46, prepared; run in session 47) (≈ 8 min; on an H100 the
# twins are held as in round 231: twins_topology, as the script ran inline then): the
# ROW_STORES GPU bit checks at BM 128 and 64 (if BM 64 passes, add 64 to moe_gluon_w4a16_prefill_ws.ROW_STORES_BLOCK_M); the lone 4K prompt on the defaults
# with families (prefill.py: the dense family on linear_ss where the plan holds the twins, the
# share on the target card); prefill_ab of ROW_STORES 1 against 0 (2 rounds). Pass the commit
# hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_moe_gluon_gpu.py \
  -k row_stores >"$OUT/gpu_row_stores.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$OUT/gpu_row_stores.log" | cut -c1-200
# on an H100 the slice's auto holds no twins: hold them as round 231 did (on, memory 0.97)
TOPO=$(twins_topology)
echo "topology $TOPO"
timeout 200 python3 bench/prefill.py --topology "$TOPO" --prompt-lens 4096 --repeats 3 \
  --no-eager --out "$OUT" >"$OUT/prefill_4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill 4096|routed experts|dense GEMMs|attention|rest|twins" \
  "$OUT/prefill_4k.log" | cut -c1-160 | head -12
PREFILL_AB_TOPOLOGY="$TOPO" prefill_ab_4k 2 \
  "rows=--launch-constant moe_gluon_w4a16_prefill_ws.ROW_STORES=1" \
  "wgmma=--launch-constant moe_gluon_w4a16_prefill_ws.ROW_STORES=0"
rm -f "$OUT/install.log"
