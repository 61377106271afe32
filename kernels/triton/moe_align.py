"""Group MoE (token, slot) pairs by expert in one Triton launch (reference: the torch
``moe_experts._align_pairs``, which this matches bit for bit).

One program walks the pairs in chunks of BC (no host sync, fixed output shapes: CUDA-graph safe):
  0. every row of sorted_pairs := the sentinel num_pairs
  1. counts[b] = pairs of bucket b (b = expert id, or num_experts for ids outside
     [0, num_experts)): a masked ``tl.histogram`` per chunk
  2. blocks[b] = cdiv(counts[b], BM);  block_end = cumsum(blocks);
     cursor = (block_end - blocks) * BM (each bucket's first row)
  3. block_expert[k] = #{b : block_end[b] <= k} (torch.searchsorted(block_end, k, right=True)),
     -1 where that is >= num_experts; per chunk of BC blocks: buckets ended before the chunk +
     the cumsum of a histogram of the ends inside it
  4. per chunk of BC pairs, in pair order: rank of pair i = number of earlier pairs of the chunk
     in its bucket (a BC x BC compare); row = cursor[bucket] (``tl.gather``) + rank;
     sorted_pairs[row] := i;  cursor += histogram of the chunk's buckets.
     Hence pairs sorted by bucket, ties by pair id (the torch version's stable argsort).
Step 0 and step 4 write the same rows from different threads: a CTA barrier separates them.
Work is linear in num_pairs but serial on one SM; above MAX_PAIRS the torch version is used.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_PAIRS = 4096  # (token, slot) pairs handled by the kernel; more go to the torch version
_CHUNK = 128  # BC: pairs (and blocks) per loop step
_FILL = 1024  # sentinel rows stored per loop step
_NUM_WARPS = 4


@triton.jit
def _load_buckets(ids_ptr, pair, num_pairs, num_experts):
    """Bucket of each pair (its expert, or num_experts if outside [0, num_experts)) and whether
    the pair exists; compared in the ids' own dtype, so a large int64 id cannot wrap into range."""
    valid = pair < num_pairs
    ids = tl.load(ids_ptr + pair, mask=valid, other=-1)
    local = (ids >= 0) & (ids < num_experts)
    return tl.where(local, ids, num_experts).to(tl.int32), valid


@triton.jit
def _align_pairs_kernel(ids_ptr, sorted_pairs_ptr, block_expert_ptr, num_pairs, num_experts,
                        num_rows, num_blocks, BM: tl.constexpr, E_PAD: tl.constexpr,
                        BC: tl.constexpr, FILL: tl.constexpr):
    """ids (num_pairs,) int32/int64 -> sorted_pairs (num_rows = num_blocks * BM,) int32,
    block_expert (num_blocks,) int32; one program; E_PAD >= num_experts + 1, a power of 2."""
    offs = tl.arange(0, BC)
    buckets = tl.arange(0, E_PAD)
    is_bucket = buckets <= num_experts  # the extra bucket num_experts included

    # Step 0: every row starts as the sentinel
    for r0 in range(0, num_rows, FILL):
        rows = r0 + tl.arange(0, FILL)
        tl.store(sorted_pairs_ptr + rows, tl.zeros((FILL,), tl.int32) + num_pairs,
                 mask=rows < num_rows)

    # Step 1: pairs per bucket
    counts = tl.zeros((E_PAD,), tl.int32)
    for c0 in range(0, num_pairs, BC):
        bucket, valid = _load_buckets(ids_ptr, c0 + offs, num_pairs, num_experts)
        counts += tl.histogram(bucket, E_PAD, mask=valid)

    # Step 2: each bucket's padded block range [block_end - blocks, block_end)
    blocks = (counts + BM - 1) // BM  # (E_PAD,); 0 on padding lanes
    block_end = tl.cumsum(blocks, 0)

    # Step 3: the bucket of every block, -1 for the extra bucket and past the last used block
    for b0 in range(0, num_blocks, BC):
        block = b0 + offs
        rel = block_end - b0  # (E_PAD,) where each bucket's range ends, from the chunk start
        ended_before = tl.sum((is_bucket & (rel <= 0)).to(tl.int32), 0)
        ends_here = tl.histogram(rel, BC, mask=is_bucket & (rel > 0) & (rel < BC))
        ended = ended_before + tl.cumsum(ends_here, 0)  # (BC,) buckets with block_end <= block
        tl.store(block_expert_ptr + block, tl.where(ended < num_experts, ended, -1),
                 mask=block < num_blocks)

    # Step 4: scatter pair ids to their rows, chunk by chunk in pair order
    tl.debug_barrier()  # step 0's sentinel stores land before step 4's (other threads') stores
    cursor = (block_end - blocks) * BM  # (E_PAD,) next free row of each bucket
    for c0 in range(0, num_pairs, BC):
        pair = c0 + offs
        bucket, valid = _load_buckets(ids_ptr, pair, num_pairs, num_experts)
        earlier = (bucket[:, None] == bucket[None, :]) & (offs[None, :] < offs[:, None])
        rank = tl.sum(earlier.to(tl.int32), 1)  # (BC,) earlier pairs of the chunk, same bucket
        row = tl.gather(cursor, bucket, 0) + rank
        tl.store(sorted_pairs_ptr + row, pair, mask=valid)
        cursor += tl.histogram(bucket, E_PAD, mask=valid)


def align_pairs(expert_ids: torch.Tensor, num_experts: int, block_m: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``moe_experts._align_pairs`` in one launch (same outputs, bit for bit; no host sync).

    expert_ids: (num_tokens, topk) (any shape) int32/int64; pair id = flat index t * topk + k.
    Returns sorted_pairs int32 (num_blocks * block_m,): pair ids expert by expert (increasing
    expert id, then pair id), each expert padded to a multiple of block_m with the sentinel
    num_pairs; block_expert int32 (num_blocks,): each block's expert, -1 for ids outside
    [0, num_experts) and past the last used block; num_blocks = cdiv(num_pairs, block_m) +
    min(num_experts + 1, num_pairs). More than MAX_PAIRS pairs: the torch version.
    """
    assert not expert_ids.is_floating_point() and not expert_ids.is_complex(), \
        f"align_pairs: integer expert ids expected, got {expert_ids.dtype}"
    num_pairs = expert_ids.numel()
    if num_pairs > MAX_PAIRS:
        from deepinfer.kernels.triton.moe_experts import _align_pairs  # (it imports this module)
        return _align_pairs(expert_ids, num_experts, block_m)
    num_blocks = triton.cdiv(num_pairs, block_m) + min(num_experts + 1, num_pairs)
    device = expert_ids.device
    sorted_pairs = torch.empty(num_blocks * block_m, dtype=torch.int32, device=device)
    block_expert = torch.empty(num_blocks, dtype=torch.int32, device=device)
    if num_pairs == 0:
        return sorted_pairs, block_expert
    flat = expert_ids.reshape(-1)
    if flat.dtype not in (torch.int32, torch.int64):
        flat = flat.to(torch.int64)
    flat = flat.contiguous()
    _align_pairs_kernel[(1,)](
        flat, sorted_pairs, block_expert, num_pairs, num_experts, sorted_pairs.numel(),
        num_blocks, BM=block_m, E_PAD=triton.next_power_of_2(num_experts + 1), BC=_CHUNK,
        FILL=_FILL, num_warps=_NUM_WARPS, num_stages=1)
    return sorted_pairs, block_expert
