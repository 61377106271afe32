"""Group MoE (token, slot) pairs by expert in one Triton launch (reference: the torch
``moe_experts._align_pairs``, which this matches bit for bit).

One program holds every pair (num_pairs <= N_PAD <= MAX_PAIRS) as a word bucket * N_PAD + pair,
bucket = the expert id, or num_experts for ids outside [0, num_experts) (another EP rank's):
  1. LSD radix sort of the words by bucket, 2 bits per pass, each pass a stable counting sort:
         one = 1 << (16 * digit)           four 16-bit counters in an int64, one per digit value
         pos = (cumsum(one) + starts of the smaller digits) >> (16 * digit) & 0xFFFF  - 1
     the words go to pos through memory (sorted_pairs serves as the scratch: it has >= num_pairs
     rows) and come back in sorted order. Stable passes: ties stay in pair order, as in the torch
     version's stable argsort.
  2. In sorted order (lane p): a bucket's run starts where the bucket differs from lane p-1 and
     ends where it differs from lane p+1 (both read back from the scratch);
         rank  = p - (first lane of the run)                       (a running max)
         block = blocks of the earlier runs (an exclusive cumsum of cdiv(run length, BM) at run
                 ends) + rank // BM;   row = block * BM + rank % BM
  3. sorted_pairs := the sentinel num_pairs, then sorted_pairs[row] = pair;
     block_expert := -1, then block_expert[block] = bucket where bucket < num_experts (every used
     block holds a pair; the extra bucket's blocks and those past the last used one stay -1).
Stores and loads of the same addresses by different threads are separated by CTA barriers.
No host sync, shapes fixed by (num_pairs, num_experts, block_m): CUDA-graph safe. Above
MAX_PAIRS (one program's registers) the torch version runs instead.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# (token, slot) pairs handled by the kernel; more go to the torch version. H200 (CUDA graph, 384
# experts, block_m 16): 1.8 / 6.1 / 15 / 32 / 60 us at 6 / 384 / 1536 / 4092 / 8190 pairs against
# 49 / 81 / 87 / 92 / 135 us for the torch version's ~36 launches
MAX_PAIRS = 8192  # < 2**16: the radix passes count in 16-bit fields
_FILL = 2048  # rows memset per loop step


@triton.jit
def _max(a, b):
    return tl.maximum(a, b)


@triton.jit
def _stable_positions(digit):
    """Where a stable counting sort by ``digit`` (int32 0..3, one per lane) sends each lane: the
    lanes of digit 0 first, then 1, 2, 3, each in lane order. Counts stay below 2**16."""
    one = tl.full(digit.shape, 1, tl.int64) << (16 * digit).to(tl.int64)
    running = tl.cumsum(one, 0)  # field d: lanes of digit d up to and including this lane
    totals = tl.sum(one, 0)
    starts = (totals << 16) + (totals << 32) + (totals << 48)  # field d: lanes of digits < d
    return (((running + starts) >> (16 * digit).to(tl.int64)) & 0xFFFF).to(tl.int32) - 1


@triton.jit
def _align_pairs_kernel(ids_ptr, sorted_pairs_ptr, block_expert_ptr, num_pairs, num_experts,
                        num_rows, num_blocks, BM: tl.constexpr, N_PAD: tl.constexpr,
                        E_BITS: tl.constexpr, FILL: tl.constexpr):
    """ids (num_pairs,) int32/int64 -> sorted_pairs (num_rows = num_blocks * BM,) int32,
    block_expert (num_blocks,) int32; one program; N_PAD >= num_pairs and 2**E_BITS >=
    num_experts + 1, powers of 2."""
    lane = tl.arange(0, N_PAD)
    valid = lane < num_pairs
    ids = tl.load(ids_ptr + lane, mask=valid, other=-1)
    # compared in the ids' own dtype: a large int64 id cannot wrap into range
    bucket = tl.where((ids >= 0) & (ids < num_experts), ids, num_experts).to(tl.int32)
    pad_word = ((1 << E_BITS) - 1) * N_PAD + lane  # padding lanes sort last, in lane order
    word = tl.where(valid, bucket * N_PAD + lane, pad_word)

    for b0 in range(0, num_blocks, FILL):
        blocks = b0 + tl.arange(0, FILL)
        tl.store(block_expert_ptr + blocks, tl.full((FILL,), -1, tl.int32),
                 mask=blocks < num_blocks)

    # Step 1: sort by bucket (padding lanes keep positions >= num_pairs and are not stored)
    for shift in tl.static_range(0, E_BITS, 2):
        pos = _stable_positions(((word // N_PAD) >> shift) & 3)
        tl.store(sorted_pairs_ptr + pos, word, mask=valid)
        tl.debug_barrier()
        word = tl.where(valid, tl.load(sorted_pairs_ptr + lane, mask=valid), pad_word)
        tl.debug_barrier()

    # Step 2: rank within the bucket's run, block and row of each pair
    bucket = word // N_PAD
    prev = tl.load(sorted_pairs_ptr + lane - 1, mask=valid & (lane > 0), other=0) // N_PAD
    nxt = tl.load(sorted_pairs_ptr + lane + 1, mask=lane + 1 < num_pairs, other=0) // N_PAD
    is_start = (lane == 0) | (prev != bucket)
    is_end = (lane == num_pairs - 1) | (nxt != bucket)
    rank = lane - tl.associative_scan(tl.where(is_start, lane, 0), 0, _max)
    run_blocks = tl.where(valid & is_end, rank // BM + 1, 0)
    block = tl.cumsum(run_blocks, 0) - run_blocks + rank // BM
    row = block * BM + rank % BM

    # Step 3: sentinel rows, then the pairs; each used block's bucket
    tl.debug_barrier()  # every thread has read the scratch
    for r0 in range(0, num_rows, FILL):
        rows = r0 + tl.arange(0, FILL)
        tl.store(sorted_pairs_ptr + rows, tl.zeros((FILL,), tl.int32) + num_pairs,
                 mask=rows < num_rows)
    tl.debug_barrier()  # the sentinel stores land before the pair stores
    tl.store(sorted_pairs_ptr + row, word % N_PAD, mask=valid)
    tl.store(block_expert_ptr + block, tl.where(bucket < num_experts, bucket, -1), mask=valid)


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
        from deepinfer.kernels.triton.moe_experts import _align_pairs  # lazy: no import cycle
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
    n_pad = triton.next_power_of_2(num_pairs)
    e_bits = max(1, num_experts.bit_length())  # 2**e_bits >= num_experts + 1 buckets
    assert n_pad << e_bits < 2**31, f"align_pairs: {num_experts} experts: words overflow int32"
    _align_pairs_kernel[(1,)](
        flat, sorted_pairs, block_expert, num_pairs, num_experts, sorted_pairs.numel(),
        num_blocks, BM=block_m, N_PAD=n_pad, E_BITS=e_bits, FILL=_FILL,
        num_warps=_num_warps(n_pad), num_stages=1)
    return sorted_pairs, block_expert


def _num_warps(n_pad: int) -> int:
    """The fastest of 4, 8 and 16 warps on the H200 at each size."""
    return 4 if n_pad <= 1024 else 8 if n_pad <= 4096 else 16
