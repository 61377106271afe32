"""The prefill expert GEMM's padded tensor work by ``PARTS``, on the CPU: how many token rows
its programs multiply (``moe_gluon_w4a16_prefill.part_tiles`` per block) against the routed
pairs, for uniform random top-k routing of a prompt of each length.

    python bench/moe_parts_padding.py [--tokens 1024,2048,4096,8192] [--experts 384] [--topk 6]

A count, not a timing: the GEMM's tensor work grows with the rows multiplied (H200 rounds
153-157: ~0.2 ms a call per 1K tokens on top of a ~1 ms constant), so the ratio says what the
parts can save of that share. Real routing is skewed; the engine's own counts come from its
``moe_align`` blocks the same way (``padded_rows``).
"""

from __future__ import annotations

import argparse

import torch

from deepinfer.kernels.triton.moe_gluon_w4a16_prefill import (
    BLOCK_M,
    launch_parts,
    part_tiles,
)


def padded_rows(pairs_per_expert: torch.Tensor, block_m: int, parts: int) -> int:
    """Token rows the programs multiply: every full block of block_m, and each expert's last
    block at its ``part_tiles`` N (BN + BN2). pairs_per_expert (E,) int64."""
    parts = launch_parts(parts, block_m)
    full, last = pairs_per_expert // block_m, pairs_per_expert % block_m
    rows = int(full.sum()) * block_m
    per_part = block_m // parts
    for fill in last[last > 0].tolist():
        used = -(-fill // per_part)
        rows += sum(part_tiles(parts, used, block_m))
    return rows


def routed_counts(tokens: int, experts: int, topk: int, seed: int) -> torch.Tensor:
    """(experts,) pairs per expert of uniform random top-k routing (distinct experts a
    token)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.rand(tokens, experts, generator=gen).topk(topk, dim=1).indices
    return torch.bincount(ids.reshape(-1), minlength=experts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="1024,2048,4096,8192")
    ap.add_argument("--experts", type=int, default=384)
    ap.add_argument("--topk", type=int, default=6)
    ap.add_argument("--block-m", type=int, default=BLOCK_M)
    ap.add_argument("--seeds", type=int, default=4)
    args = ap.parse_args()
    print(f"| tokens | pairs per expert | rows multiplied / pairs at parts 1 / 2 / 4 / 8 "
          f"(BM {args.block_m}) |")
    print("|---:|---:|---|")
    for tokens in (int(t) for t in args.tokens.split(",")):
        ratios = {p: 0.0 for p in (1, 2, 4, 8)}
        for seed in range(args.seeds):
            counts = routed_counts(tokens, args.experts, args.topk, seed)
            for p in ratios:
                ratios[p] += padded_rows(counts, args.block_m, p) / int(counts.sum())
        cells = " / ".join(f"{ratios[p] / args.seeds:.3f}" for p in ratios)
        print(f"| {tokens} | {tokens * args.topk / args.experts:.0f} | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
