"""Decode expert GEMM over MXFP4 weights in Gluon (Triton's explicit-layout dialect), SM90
only — a PROBE (bf16 MMA), and the shared pieces of ``moe_gluon_w4a8`` (the W4A8 one).

    out1[p, o] = x[row(p)] @ W1_e^T[:, o]   (and out3 with W3 when GATED), e = expert of pair p

Why Gluon beside ``moe_experts``' Triton kernel: at decode a block holds a handful of tokens per
expert, so the GEMM is a stream over the MXFP4 bytes, and the Triton kernel's weight tiles go
global -> shared (cp.async) -> registers (unpack) -> shared again for the MMA operand layout.
Here the layouts are explicit: the weights go TMA -> shared -> registers -> wgmma A operand.

  * One program = one block of BM pairs of one expert (``moe_align.align_pairs``) x 64 weight
    rows (one warpgroup, the wgmma M side: out^T[64, BM] = W[64, K] @ x^T[K, BM]).
  * Weight tiles [64 rows, BK/2 bytes] of each K step stream through a STAGES-deep shared ring
    filled by TMA (``start_ring``, ``issue_step``: one mbarrier per stage); the token tile
    x[BM, BK] (L2-resident) is split into even / odd columns and written to a 2-deep shared
    ring as the wgmma B operand. The accumulators are waited at the end of each step: one
    still in flight across the loop's back edge made ptxas serialize every wgmma (C7515).
  * Kernel order (``to_kernel_order``, once at load): fragment order — inside each K step of a
    row, natural byte c = 16 s + 8 h + 2 q + u is stored at q * BK/8 + 4 s + 2 h + u, so a
    thread's wgmma A-fragment bytes are 16 contiguous bytes (one ``ld.shared`` of 16 B) — then
    ``mxfp4_words``' word order inside each 32-bit word (the cheaper unpack).
  * The unpack (``mxfp4_words``' PTX with the scale built in the asm: one bf16x2 multiply per 2
    weights by 2^(e - 1), exact for scale bytes <= 128, which the caller vouches for) is
    elementwise; a reshape / permute gives the even and odd K elements as [64, BK/2] tensors
    whose layout IS the wgmma register-A layout (``convert_layout`` is free).
  * Measured (round 38, H200): parity with the Triton kernel (gated 0.59-0.61 of HBM); the
    W4A8 kernel (``moe_gluon_w4a8``) shares ``issue_step``, ``start_ring``, ``store_tiles`` and
    ``weight_descriptor`` and reaches 0.70-0.72 (round 39).

Shapes: x (rows, K) bf16 (exact Q8_32 values, the A_BF16 form), w (E, O, K/2) uint8 in kernel
order for this BK, s (E, O, K/32) uint8, sorted_pairs (num_blocks * BM,) int32 (padding =
num_pairs), block_expert (num_blocks,) int32 (-1 = idle), out (num_pairs, O) fp32.
Reference: ``reference_grouped`` below (dequantize, matmul per expert, fp32).
"""

from __future__ import annotations

import torch

from deepinfer.kernels.mxfp4_word_order import from_word_order, to_word_order
from deepinfer.kernels.quantized import Mxfp4ExpertWeights
from deepinfer.kernels.triton.mxfp4_words import WORDS_TO_BF16_ONE_MUL

try:  # Gluon ships with triton >= 3.5; the layouts below need the NVIDIA Hopper module
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    HAS_GLUON = True
except (ImportError, OSError, RuntimeError):  # pragma: no cover - depends on the install
    HAS_GLUON = False

ROWS_PER_PROGRAM = 64  # one warpgroup: the wgmma M side
QUADS = 4  # quad lanes of a wgmma A fragment row
DEFAULT_BLOCK_K = 128

if HAS_GLUON:
    # ``mxfp4_words.WORDS_TO_BF16_ONE_MUL`` (weights in word order) with the scale built in
    # the asm: $5 = the word's scale byte e four times; s = 2^(e - 1) as bf16x2, the bits
    # (e + 126) << 7 in each half
    _UNPACK_ASM = gl.constexpr(
        WORDS_TO_BF16_ONE_MUL.value
        .replace(".reg .b32 t0, t1, t2, t3, r, m, nz;", ".reg .b32 t0, t1, t2, t3, r, m, nz, s;")
        .replace("mov.b32 nz, 0x80008000;", "mov.b32 nz, 0x80008000;\n"
                 "prmt.b32 s, $5, 0, 0x4140; add.u32 s, s, 0x007E007E; shl.b32 s, s, 7;")
        .replace("$5, nz", "s, nz").replace("$6, nz", "s, nz"))
    # 3.6 calls the CTA barrier thread_barrier, 3.7 barrier (the Gluon kernels share it)
    cta_barrier = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier

    @gluon.jit
    def _fragment_operand(t, NS: gl.constexpr, BK: gl.constexpr, LA: gl.constexpr):
        """[64, 4, NS, 4] (row 16 w + 8 m + g; quad lane q; word s; byte 2 h + u) -> [64, BK/2]
        in the wgmma A layout: the same row, column 16 s + 8 h + 2 q + u."""
        t = gl.reshape(t, [4, 2, 8, 4, NS, 2, 2])  # [64, 4, NS, 4] -> w m g q s h u
        t = gl.permute(t, [0, 1, 2, 4, 5, 3, 6])
        t = gl.reshape(t, [64, BK // 2])
        return gl.convert_layout(t, LA)

    @gluon.jit
    def _unpack(p, e, NS: gl.constexpr, BK: gl.constexpr, L4: gl.constexpr,
                LA: gl.constexpr):
        """Packed bytes p [64, BK/2] (smem load layout) and their words' scale bytes e
        [64, 4, NS] (SliceLayout(3, L4)) -> the even and odd K elements of the step as exactly
        scaled bf16 wgmma A operands [64, BK/2]."""
        p = gl.convert_layout(gl.reshape(p, [64, 4, NS, 4]), L4)  # same registers
        p, e4 = gl.broadcast(p, e[:, :, :, None])
        even, odd = gl.inline_asm_elementwise(
            _UNPACK_ASM, "=r,=r,=r,=r,r,r", [p, e4],
            dtype=(gl.bfloat16, gl.bfloat16), is_pure=True, pack=4)
        return _fragment_operand(even, NS, BK, LA), _fragment_operand(odd, NS, BK, LA)

    @gluon.jit
    def issue_step(w1_desc, w3_desc, w1_s, w3_s, bars, row0, step, num_steps,
                   GATED: gl.constexpr, STAGES: gl.constexpr, BK: gl.constexpr,
                   TILE: gl.constexpr = 0, ROW3: gl.constexpr = 0):
        """TMA of K step ``step``'s weight tiles [64, BK/2] into ring stage step % STAGES (none
        past the last step). TILE 0: the box at [row0, step * BK/2] of the [E * O, K/2] view;
        TILE > 0 (step tiles, row0 from ``tile_row0``): at [row0 + step * TILE, 0] of the
        [E * O * K/BK, BK/2] view. ROW3: w3's box that many rows below w1's (a paired launch:
        two halves of one weight)."""
        st = step % STAGES
        ok = step < num_steps
        nbytes: gl.constexpr = 64 * (BK // 2) * (2 if GATED else 1)
        if TILE == 0:
            y = row0
            x = step * (BK // 2)
        else:
            y = row0 + step * TILE
            x = 0
        mbarrier.expect(bars.index(st), nbytes, pred=ok)
        tma.async_copy_global_to_shared(w1_desc, [y, x], bars.index(st), w1_s.index(st),
                                        pred=ok)
        if GATED:
            tma.async_copy_global_to_shared(w3_desc, [y + ROW3, x], bars.index(st),
                                            w3_s.index(st), pred=ok)

    @gluon.jit
    def tile_row0(row0, num_steps, TILE: gl.constexpr):
        """Rows [row0, row0 + R) of the flattened (E * O) rows in step tiles of TILE rows
        (``mxfp4_w4a8_order``; R | TILE, row0 a multiple of R): the [E * O * K/128, 64] view's
        row of their step 0 (step s: + s * TILE)."""
        return (row0 // TILE) * num_steps * TILE + row0 % TILE

    @gluon.jit
    def start_ring(w1_desc, w3_desc, row0, num_steps, GATED: gl.constexpr,
                   STAGES: gl.constexpr, BK: gl.constexpr, TILE: gl.constexpr = 0,
                   ROW3: gl.constexpr = 0):
        """The weight ring: STAGES shared tiles [64, BK/2] per projection (w3: GATED only), one
        mbarrier per stage, and the TMA of the first STAGES - 1 K steps issued."""
        SW: gl.constexpr = w1_desc.layout
        w1_s = gl.allocate_shared_memory(gl.uint8, [STAGES, 64, BK // 2], SW)
        w3_s = gl.allocate_shared_memory(gl.uint8, [STAGES if GATED else 1, 64, BK // 2], SW)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for b in gl.static_range(STAGES):
            mbarrier.init(bars.index(b), count=1)
        for b in gl.static_range(STAGES - 1):
            issue_step(w1_desc, w3_desc, w1_s, w3_s, bars, row0, b, num_steps, GATED, STAGES,
                       BK, TILE, ROW3)
        return w1_s, w3_s, bars

    @gluon.jit
    def store_tiles(acc1, acc3, out1_ptr, out3_ptr, pairs_ptr, block, tile, num_pairs,
                    stride_om, GATED: gl.constexpr, BM: gl.constexpr, MMA: gl.constexpr):
        """out[pair, tile * 64 + row] = acc[row, t] for the block's valid pairs (accumulators
        [64, BM] in the wgmma layout MMA; cast to out's dtype)."""
        rows_o = tile * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, MMA))
        pairs_o = gl.load(pairs_ptr + block * BM + gl.arange(0, BM, layout=gl.SliceLayout(0, MMA)))
        valid = pairs_o < num_pairs
        offs = (gl.where(valid, pairs_o, 0).to(gl.int64) * stride_om)[None, :] + rows_o[:, None]
        mask = valid[None, :] & (rows_o[:, None] >= 0)
        gl.store(out1_ptr + offs, acc1, mask=mask)
        if GATED:
            gl.store(out3_ptr + offs, acc3, mask=mask)

    @gluon.jit
    def _w4_decode_kernel(x_ptr, w1_desc, s1_ptr, w3_desc, s3_ptr, pairs_ptr, block_expert_ptr,
                          out1_ptr, out3_ptr, num_pairs, O, K, x_row_div,
                          stride_xm, stride_se, stride_sn, stride_om,
                          GATED: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr,
                          STAGES: gl.constexpr, num_warps: gl.constexpr):
        gl.static_assert(BK == 128, "the smem load layout below is written for BK = 128")
        NS: gl.constexpr = BK // 32  # scale groups (words per quad lane) per row and K step
        # smem tile [64 rows, 64 bytes] -> registers: thread (warp w, lane g*4+q) and register
        # bit m hold row 16 w + 8 m + g, bytes 16 q .. 16 q + 15 (two 16-byte loads)
        L64: gl.constexpr = gl.DistributedLinearLayout(
            reg_bases=[[0, 1], [0, 2], [0, 4], [0, 8], [8, 0]],
            lane_bases=[[0, 16], [0, 32], [1, 0], [2, 0], [4, 0]],
            warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[64, 64])
        # the same registers as [64 rows, 4 quad lanes, NS words, 4 bytes]
        L4: gl.constexpr = gl.DistributedLinearLayout(
            reg_bases=[[0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 1, 0], [0, 0, 2, 0], [8, 0, 0, 0]],
            lane_bases=[[0, 1, 0, 0], [0, 2, 0, 0], [1, 0, 0, 0], [2, 0, 0, 0], [4, 0, 0, 0]],
            warp_bases=[[16, 0, 0, 0], [32, 0, 0, 0]], block_bases=[], shape=[64, 4, NS, 4])
        LE: gl.constexpr = gl.SliceLayout(3, L4)
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BM, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        LX: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        SX: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16,
                                                 rank=2)
        block = gl.program_id(0)
        tile = gl.program_id(1)
        expert = gl.load(block_expert_ptr + block)
        if expert >= 0:
            row0 = expert * O + tile * 64
            num_steps = K // BK
            w1_s, w3_s, bars = start_ring(w1_desc, w3_desc, row0, num_steps, GATED, STAGES, BK)

            r_s = tile * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, gl.SliceLayout(2, LE)))
            q_s = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, LE)))
            j_s = gl.arange(0, NS, layout=gl.SliceLayout(0, gl.SliceLayout(1, LE)))
            s_off = ((r_s.to(gl.int64) * stride_sn)[:, None, None] + (q_s * 0)[None, :, None]
                     + j_s[None, None, :])
            s1_base = s1_ptr + expert.to(gl.int64) * stride_se
            s3_base = s3_ptr + expert.to(gl.int64) * stride_se

            t_x = gl.arange(0, BM, layout=gl.SliceLayout(1, LX))
            pairs_x = gl.load(pairs_ptr + block * BM + t_x)
            rows_x = (gl.where(pairs_x < num_pairs, pairs_x, 0) // x_row_div).to(gl.int64)
            k_x = gl.arange(0, BK, layout=gl.SliceLayout(0, LX))
            x_ptrs = x_ptr + (rows_x * stride_xm)[:, None] + k_x[None, :]

            xe_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BM, BK // 2], SX)
            xo_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BM, BK // 2], SX)
            acc1 = gl.zeros([64, BM], gl.float32, MMA)
            acc3 = gl.zeros([64, BM], gl.float32, MMA)

            e1 = gl.load(s1_base + s_off)
            e3 = e1
            if GATED:
                e3 = gl.load(s3_base + s_off)
            xt = gl.load(x_ptrs)
            for i in range(num_steps):
                # the stage consumed at step i - 1 is free: every warp passed that step's barrier
                # after its shared-memory reads
                issue_step(w1_desc, w3_desc, w1_s, w3_s, bars, row0, i + STAGES - 1, num_steps,
                            GATED, STAGES, BK)
                nxt = gl.minimum(i + 1, num_steps - 1)
                e1_next = gl.load(s1_base + s_off + nxt * NS)
                e3_next = e1_next
                if GATED:
                    e3_next = gl.load(s3_base + s_off + nxt * NS)
                xt_next = gl.load(x_ptrs + nxt * BK)
                x_even, x_odd = gl.split(gl.reshape(xt, [BM, BK // 2, 2]))
                stage = i % STAGES
                mbarrier.wait(bars.index(stage), (i // STAGES) & 1)
                p1 = w1_s.index(stage).load(L64)
                a1_even, a1_odd = _unpack(p1, e1, NS, BK, L4, LA)
                xe_s = xe_smem.index(i % 2)
                xo_s = xo_smem.index(i % 2)
                xe_s.store(x_even)
                xo_s.store(x_odd)
                if GATED:
                    p3 = w3_s.index(stage).load(L64)
                fence_async_shared()
                cta_barrier()
                acc1 = warpgroup_mma(a1_even, xe_s.permute((1, 0)), acc1, is_async=True)
                acc1 = warpgroup_mma(a1_odd, xo_s.permute((1, 0)), acc1, is_async=True)
                if GATED:
                    a3_even, a3_odd = _unpack(p3, e3, NS, BK, L4, LA)
                    acc3 = warpgroup_mma(a3_even, xe_s.permute((1, 0)), acc3, is_async=True)
                    acc3 = warpgroup_mma(a3_odd, xo_s.permute((1, 0)), acc3, is_async=True)
                # the accumulators cross the loop's back edge as plain registers (an in-flight
                # accumulator there made ptxas serialize every wgmma: C7515); other programs on
                # the SM overlap this wait
                if GATED:
                    acc1, acc3 = warpgroup_mma_wait(num_outstanding=0, deps=(acc1, acc3))
                else:
                    acc1 = warpgroup_mma_wait(num_outstanding=0, deps=(acc1, ))
                e1 = e1_next
                e3 = e3_next
                xt = xt_next
            for b in gl.static_range(STAGES):
                mbarrier.invalidate(bars.index(b))

            store_tiles(acc1, acc3, out1_ptr, out3_ptr, pairs_ptr, block, tile, num_pairs,
                        stride_om, GATED, BM, MMA)


def to_fragment_order(packed: torch.Tensor, block_k: int = DEFAULT_BLOCK_K) -> torch.Tensor:
    """(..., K/2) packed MXFP4 bytes -> the same bytes in this kernel's fragment order.

    Inside each block_k / 2 bytes: natural byte c = 16 s + 8 h + 2 q + u goes to
    q * block_k / 8 + 4 s + 2 h + u. A pure permutation (``from_fragment_order`` undoes it)."""
    half = packed.shape[-1]
    assert half % (block_k // 2) == 0 and block_k % 32 == 0, (packed.shape, block_k)
    lead = packed.shape[:-1]
    v = packed.reshape(*lead, half // (block_k // 2), block_k // 32, 2, 4, 2)  # steps s h q u
    nd = v.dim()
    perm = list(range(nd - 5)) + [nd - 5, nd - 2, nd - 4, nd - 3, nd - 1]  # steps q s h u
    return v.permute(perm).contiguous().reshape(packed.shape)


def from_fragment_order(packed: torch.Tensor, block_k: int = DEFAULT_BLOCK_K) -> torch.Tensor:
    """Inverse of ``to_fragment_order``."""
    half = packed.shape[-1]
    lead = packed.shape[:-1]
    v = packed.reshape(*lead, half // (block_k // 2), 4, block_k // 32, 2, 2)  # steps q s h u
    nd = v.dim()
    perm = list(range(nd - 5)) + [nd - 5, nd - 3, nd - 2, nd - 4, nd - 1]  # steps s h q u
    return v.permute(perm).contiguous().reshape(packed.shape)


def to_kernel_order(packed: torch.Tensor, block_k: int = DEFAULT_BLOCK_K) -> torch.Tensor:
    """Checkpoint-order MXFP4 bytes (..., K/2) -> this kernel's layout: fragment order, then
    word order (``mxfp4_words``: each 32-bit word's bits arranged for the cheaper unpack)."""
    return to_word_order(to_fragment_order(packed, block_k))


def from_kernel_order(packed: torch.Tensor, block_k: int = DEFAULT_BLOCK_K) -> torch.Tensor:
    """Inverse of ``to_kernel_order``."""
    return from_fragment_order(from_word_order(packed), block_k)


def weight_descriptor(packed: torch.Tensor, block_k: int = DEFAULT_BLOCK_K):
    """TMA descriptor of (E, O, K/2) kernel-order bytes as a 2-D [E * O, K/2] tensor, one box =
    one program's K step: [64 rows, block_k / 2 bytes], unswizzled (both Gluon probes)."""
    num_experts, out_features, half = packed.shape
    flat = packed.reshape(num_experts * out_features, half)
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()),
                            [ROWS_PER_PROGRAM, block_k // 2], layout)


def w4_decode_gemm(x: torch.Tensor, w1: torch.Tensor, s1: torch.Tensor,
                   w3: torch.Tensor | None, s3: torch.Tensor | None,
                   sorted_pairs: torch.Tensor, block_expert: torch.Tensor, num_pairs: int,
                   x_row_div: int, block_m: int, block_k: int = DEFAULT_BLOCK_K,
                   stages: int = 4) -> tuple[torch.Tensor, torch.Tensor | None]:
    """out1 (num_pairs, O) fp32 = x[pair // x_row_div] @ W1[expert]^T (and out3 with W3).

    w1/w3 (E, O, K/2) uint8 in ``to_kernel_order`` for block_k, s1/s3 (E, O, K/32) uint8 with
    every byte <= 128 (the caller vouches), x (rows, K) bf16 exact values; pairs grouped by
    ``moe_align.align_pairs(ids, E, block_m)``."""
    assert HAS_GLUON, "w4_decode_gemm needs triton's Gluon (triton >= 3.5)"
    num_experts, out_features, half = w1.shape
    k = half * 2
    assert k % block_k == 0 and out_features % ROWS_PER_PROGRAM == 0 and block_m in (8, 16)
    assert x.dtype == torch.bfloat16 and x.stride(1) == 1 and x.shape[1] == k
    gated = w3 is not None
    out1 = torch.empty((num_pairs, out_features), dtype=torch.float32, device=x.device)
    out3 = torch.empty_like(out1) if gated else out1
    d1 = weight_descriptor(w1, block_k)
    d3 = weight_descriptor(w3, block_k) if gated else d1
    grid = (block_expert.numel(), out_features // ROWS_PER_PROGRAM)
    _w4_decode_kernel[grid](
        x, d1, s1, d3, s3 if gated else s1, sorted_pairs, block_expert, out1, out3, num_pairs,
        out_features, k, x_row_div, x.stride(0), s1.stride(0), s1.stride(1), out1.stride(0),
        GATED=gated, BM=block_m, BK=block_k, STAGES=stages, num_warps=4)
    return out1, (out3 if gated else None)


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

