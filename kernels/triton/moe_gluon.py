"""The shared pieces of the Gluon (Triton's explicit-layout dialect) expert GEMMs, SM90 only:
``HAS_GLUON`` (triton's Gluon and its Hopper module import), ``cta_barrier``, the TMA weight ring
(``start_ring``, ``issue_step``: STAGES shared tiles [64 rows, BK/2 bytes] per operand, w1 and
w3, one mbarrier per stage), ``tile_row0`` (a box's row in the W4A8 order's step tiles),
``store_tiles`` (the accumulators to the pairs' output rows) and ``reference_grouped`` (the
tests' and benches' reference: dequantize, matmul per expert, fp32). Used by
``moe_gluon_w4a8`` (the W4A8 decode kernel), ``moe_gluon_w4a16_prefill`` (and ``_ws``) and the
other Gluon kernels (``cta_barrier``).

The bf16 decode expert GEMM probe that lived here (``_w4_decode_kernel``, ``w4_decode_gemm``,
its fragment / kernel orders) was removed in session 42 (measured slower: session 10's round 39,
gated 0.60-0.63 of HBM against the W4A8 kernel's 0.70-0.72), code at commit ad9ad7b.
"""

from __future__ import annotations

import torch

from deepinfer.kernels.quantized import Mxfp4ExpertWeights

try:  # Gluon ships with triton >= 3.5; the layouts below need the NVIDIA Hopper module (all of
    # what the Gluon kernels import from it: HAS_GLUON only where all of it imports)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: F401
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: F401
    HAS_GLUON = True
except (ImportError, OSError, RuntimeError):  # pragma: no cover - depends on the install
    HAS_GLUON = False

if HAS_GLUON:
    # 3.6 calls the CTA barrier thread_barrier, 3.7 barrier (the Gluon kernels share it)
    cta_barrier = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier

    @gluon.jit
    def issue_step(w1_desc, w3_desc, w1_s, w3_s, bars, row0, step, num_steps,
                   STAGES: gl.constexpr, BK: gl.constexpr, TILE: gl.constexpr = 0,
                   ROW3: gl.constexpr = 0):
        """TMA of K step ``step``'s weight tiles [64, BK/2] into ring stage step % STAGES (none
        past the last step). TILE 0: the box at [row0, step * BK/2] of the [E * O, K/2] view;
        TILE > 0 (step tiles, row0 from ``tile_row0``): at [row0 + step * TILE, 0] of the
        [E * O * K/BK, BK/2] view. ROW3: w3's box that many rows below w1's (a paired launch:
        two halves of one weight)."""
        st = step % STAGES
        ok = step < num_steps
        nbytes: gl.constexpr = 64 * (BK // 2) * 2
        if TILE == 0:
            y = row0
            x = step * (BK // 2)
        else:
            y = row0 + step * TILE
            x = 0
        mbarrier.expect(bars.index(st), nbytes, pred=ok)
        tma.async_copy_global_to_shared(w1_desc, [y, x], bars.index(st), w1_s.index(st),
                                        pred=ok)
        tma.async_copy_global_to_shared(w3_desc, [y + ROW3, x], bars.index(st),
                                        w3_s.index(st), pred=ok)

    @gluon.jit
    def tile_row0(row0, num_steps, TILE: gl.constexpr):
        """Rows [row0, row0 + R) of the flattened (E * O) rows in step tiles of TILE rows
        (``mxfp4_w4a8_order``; R | TILE, row0 a multiple of R): the [E * O * K/128, 64] view's
        row of their step 0 (step s: + s * TILE)."""
        return (row0 // TILE) * num_steps * TILE + row0 % TILE

    @gluon.jit
    def start_ring(w1_desc, w3_desc, row0, num_steps, STAGES: gl.constexpr, BK: gl.constexpr,
                   TILE: gl.constexpr = 0, ROW3: gl.constexpr = 0):
        """The weight ring: STAGES shared tiles [64, BK/2] per operand (w1, w3), one mbarrier
        per stage, and the TMA of the first STAGES - 1 K steps issued."""
        SW: gl.constexpr = w1_desc.layout
        w1_s = gl.allocate_shared_memory(gl.uint8, [STAGES, 64, BK // 2], SW)
        w3_s = gl.allocate_shared_memory(gl.uint8, [STAGES, 64, BK // 2], SW)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for b in gl.static_range(STAGES):
            mbarrier.init(bars.index(b), count=1)
        for b in gl.static_range(STAGES - 1):
            issue_step(w1_desc, w3_desc, w1_s, w3_s, bars, row0, b, num_steps, STAGES, BK,
                       TILE, ROW3)
        return w1_s, w3_s, bars

    @gluon.jit
    def store_tiles(acc1, acc3, out1_ptr, out3_ptr, pairs_ptr, block, tile, num_pairs,
                    stride_om, BM: gl.constexpr, MMA: gl.constexpr):
        """out1 / out3[pair, tile * 64 + row] = acc1 / acc3[row, t] for the block's valid
        pairs (accumulators [64, BM] in the wgmma layout MMA; cast to out's dtype)."""
        rows_o = tile * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, MMA))
        pairs_o = gl.load(pairs_ptr + block * BM + gl.arange(0, BM, layout=gl.SliceLayout(0, MMA)))
        valid = pairs_o < num_pairs
        offs = (gl.where(valid, pairs_o, 0).to(gl.int64) * stride_om)[None, :] + rows_o[:, None]
        mask = valid[None, :] & (rows_o[:, None] >= 0)
        gl.store(out1_ptr + offs, acc1, mask=mask)
        gl.store(out3_ptr + offs, acc3, mask=mask)


def reference_grouped(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor, expert_of_pair:
                      torch.Tensor, x_row_div: int) -> torch.Tensor:
    """fp32 (num_pairs, O): x[p // x_row_div] @ dequantize(w[e(p)])^T, w in NATURAL order."""
    num_pairs = expert_of_pair.numel()
    out = torch.zeros((num_pairs, w.shape[1]), dtype=torch.float32, device=x.device)
    rows = torch.arange(num_pairs, device=x.device) // x_row_div
    for e in torch.unique(expert_of_pair).tolist():
        sel = (expert_of_pair == e).nonzero().flatten()
        out[sel] = x[rows[sel]].float() @ Mxfp4ExpertWeights(
            w[e:e + 1], s[e:e + 1]).dequantize()[0].float().T
    return out

