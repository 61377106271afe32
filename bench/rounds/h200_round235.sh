#!/usr/bin/env bash
# Device round 235 (session 47) (≈ 7 min): the host caches (a weight's container and TMA
# descriptors built once, the device capability asked once) against the tree in ab-base.tar
# (771b582, before them). GPU checks of the paths whose descriptors are now cached
# (linear_ss through the linear dispatch, the producer-warp expert GEMM); the lone 4K prompt
# with the twins held (twins_topology), 5 repeats with host phases, base / new twice in
# alternation (separate processes); 64 prompts of 128 tokens in one generate (the host-paced
# case), base / new once. Carry ab-base.tar. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
ab_base_tree ab-base.tar || exit 1
TOPO=$(twins_topology)
echo "topology $TOPO"
# round 236 runs this script with more GPU tests, one lone pair and 7 repeats
GPU_TESTS=(${GPU_TESTS:-tests/gpu/test_linear_ss_gpu.py tests/gpu/test_moe_gluon_gpu.py})
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider "${GPU_TESTS[@]}" \
  -k "${GPU_K:-linear_ss or row_stores}" >"$OUT/gpu.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$OUT/gpu.log" | cut -c1-200
LONE=(--topology "$TOPO" --prompt-lens 4096 --repeats "${LONE_REPEATS:-5}" --no-eager --no-profile
      --host-phases)
SHORT=(--topology "$TOPO" --prompt-lens 128 --batch-prompts 64 --repeats 3 --no-eager
       --no-profile)
for i in $(seq "${LONE_PAIRS:-2}"); do
  for tree in base new; do
    prefill_tree $tree "lone_${tree}_$i.log" "${LONE[@]}"
    grep -E "^prefill 4096|inputs built|layer [12] enqueue|backbone enqueued|result collected" \
      "$OUT/lone_${tree}_$i.log" | tr -s ' ' | paste -sd' ' | cut -c1-220
  done
done
for tree in base new; do
  prefill_tree $tree "short_${tree}.log" "${SHORT[@]}"
  grep -E "^prefill 64 x" "$OUT/short_${tree}.log"
done
rm -f "$OUT/install.log"
