"""The SwiGLU as the gated prefill expert GEMM's epilogue (Gluon, SM90): a program that holds
the gate and the up projections of the same 64 intermediate features for its block's tokens
(``moe_gluon_w4a16_prefill_ws``, ``GATED``) writes h's Q8_32 values straight into the down
GEMM's token layout, so neither g nor u goes through memory and the separate SwiGLU launch
(``moe_swiglu.swiglu_fake_q8_slots``: ~114 µs a 4K layer on the H200, round 200) goes away.
On in the pipeline since session 43 (``moe_gluon_w4a16_prefill.FUSED_SWIGLU``) in the octet
layout; ``MODE`` 2 skips it (a probe for bench/gated_swiglu.py).

    h[t, f] = Q8_32( bf16( w_t * silu(min(g, L)) * clamp(u, -L, L) ) ),   g, u rounded to bf16

per token t (a slot of the block; its pair's routing weight w_t) and feature f, then stored at
row ``slot`` of the (slots, I) bf16 tensor with each 32-feature group in the wgmma A operand's
order: column 32 G + v holds feature 32 G + K_off(v) (``mxfp4_w4a8_bf16.k_permutation``), as
``swiglu_fake_q8_slots`` stores it; padding slots are not written. The same fp32 operations in
the same order as ``moe_swiglu.swiglu_h`` and ``quant_act.q8_32_groups`` / ``q8_32_values``
(the amax is a max: any reduction order gives its bits), so the same bits — checked on the GPU
against the two-GEMM path (tests/gpu/test_moe_gluon_gpu.py).

How: each part fill's consumer loop stores its accumulators [2 F, N] (rows [0, F) gate, [F,
2 F) up) as bf16 (the GEMM's output rounding) into one [2 F, BM] tile of the block
(``moe_gluon_w4a16_prefill_ws.gated_tile``: the token ring, a token's features contiguous);
after the partitions join, this epilogue runs once for every fill, in chunks of
``TOKEN_CHUNK`` tokens (chunks of padding skipped), in the octet layout: a token's 32-feature
group on four lanes, eight contiguous features a lane (one 16-byte shared load each of g and
u; the group's amax an in-lane max and two shuffles; two 8-byte stores a lane, as the
A-operand order puts those features at two runs of four columns). Its history (µs a call
against the two GEMMs and the SwiGLU apart): a group's features in one thread 15-20 % slower
(round 205, H200); across a warp's lanes inside each part-fill loop 4-9 % slower (206, H100);
across lanes once after the join (the lane layout) 6-10 % slower (207), level at the 4K shape
(208-210: 3,299 vs 3,311; its epilogue's shuffles and 2-byte stores 4,304 SASS instructions);
four lanes a group (the quad layout: 2,432 instructions) 3,116; the octet layout (the same
count, 16-byte shared loads) 3,096 — 6.5 % faster than apart (round 215, session 43; the lane
and quad layouts were removed after, code at commit 97c6c64)."""

from __future__ import annotations

from deepinfer.kernels.triton.moe_gluon import HAS_GLUON

TOKEN_CHUNK = 32  # tokens an epilogue pass holds (8 a warp's row of lanes), read at the launch
# (bench/gated_swiglu.py --chunks: 32, 64 or 128; H100 round 210: larger chunks slower)
# the epilogue, read at the launch: 4 the octet layout (the engine's), 2 a probe that skips it
# (h not written: the K loop's own cost in the GATED form, bench/gated_swiglu.py). H100 round
# 215 (session 43), µs a call, the same bits as apart: the 4K shape apart 3,311, octets 3,096,
# no epilogue 2,959; 1,024 tokens of 32 skewed experts (tests/gpu) at BM 128 eighths / quarters
# and BM 64: apart 611 / 623 / 781, octets 596 / 587 / 753
MODE = 4

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    # h's tile in shared memory: [2 F, BN] bf16 with the feature axis contiguous
    H_SHARED = gl.constexpr(gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1,
                                                    order=[0, 1]))

    # the octet layout's view of h_s: [BN tokens, 2 F / 8, i, q] with feature 8 a + 2 i + q at
    # (t, a, i, q) — the same bytes as H_SHARED's [2 F, BN]
    H_OCTETS = gl.constexpr(gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1,
                                                    order=[3, 2, 1, 0]))

    @gluon.jit
    def swiglu_q8_store(h_s, pairs_ptr, rw_ptr, out_ptr, num_pairs, col0, slot0, stride_om,
                        limit, num_warps: gl.constexpr, CHUNK: gl.constexpr = 32):
        """h_s [2 F, BN] bf16 (H_SHARED; rows [0, F): the gate projection of features col0 ..
        col0 + F, rows [F, 2 F): the up projection of the same features, as the GEMM would
        have stored them) of the tokens in slots slot0 .. slot0 + BN -> h's Q8_32 values
        into out rows ``slot`` (bf16, stride stride_om), columns col0 .. col0 + F in each
        group's A-operand order; chunks of CHUNK (``TOKEN_CHUNK``) tokens without a valid
        pair (the block's padding) skipped.

        The octet layout: a group's 32 features of a token on four lanes (a = 0 .. 3), eight
        contiguous features 8 a + 2 i + q (i < 4, q < 2) a lane — one 16-byte shared-memory
        load each of g and u — which the A-operand order puts at columns 4 (a % 2) + i + 8 q
        + 16 (a // 2) (``mxfp4_w4a8_bf16.k_permutation``): for each q four adjacent columns,
        two 8-byte stores a lane. The amax: an in-lane max and two shuffles; eight tokens a
        warp, the chunk's tokens across warps and registers."""
        BO: gl.constexpr = h_s.shape[0]
        BN: gl.constexpr = h_s.shape[1]
        F: gl.constexpr = BO // 2
        TC: gl.constexpr = BN if BN < CHUNK else CHUNK
        gl.static_assert(TC % (8 * num_warps) == 0, "octet layout: 8 tokens a warp, whole rows")
        hs = h_s._reinterpret(gl.bfloat16, [BN, BO // 8, 4, 2], H_OCTETS)
        # loads: [tokens, octet a, i, q], q fastest in a lane (memory order: 16 bytes)
        LOAD: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 1, 4, 2],
                                              threads_per_warp=[8, 4, 1, 1],
                                              warps_per_cta=[num_warps, 1, 1, 1],
                                              order=[3, 2, 1, 0])
        # stores: [tokens, octet a, q, i], i fastest in a lane (four adjacent output columns)
        STORE: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 1, 2, 4],
                                               threads_per_warp=[8, 4, 1, 1],
                                               warps_per_cta=[num_warps, 1, 1, 1],
                                               order=[3, 2, 1, 0])
        a = _axis(4, 1, STORE)
        col = 4 * (a % 2) + _axis(4, 3, STORE) + 8 * _axis(2, 2, STORE) + 16 * (a // 2)
        for c in gl.static_range(BN // TC):
            t = c * TC + _axis(TC, 0, STORE)  # [TC, 1, 1, 1]
            pairs = gl.load(pairs_ptr + slot0 + t)
            valid = pairs < num_pairs
            if gl.max(gl.max(gl.max(gl.max(valid.to(gl.int32), axis=3), axis=2), axis=1),
                      axis=0) > 0:  # else the block's padding
                _chunk(hs, rw_ptr, out_ptr, pairs, valid, col0, slot0 + t, col, stride_om,
                       limit, c * TC, F, TC, LOAD, STORE)

    @gluon.jit
    def _chunk(hs, rw_ptr, out_ptr, pairs, valid, col0, slots, col, stride_om, limit,
               T0: gl.constexpr, F: gl.constexpr, TC: gl.constexpr, LOAD: gl.constexpr,
               STORE: gl.constexpr):
        """Tokens T0 .. T0 + TC of the tile ([TC, 1, 1, 1] slots, pairs, validity in STORE):
        every group's h stored for the valid ones."""
        rw = gl.load(rw_ptr + gl.where(valid, pairs, 0), mask=valid, other=0.0)
        rows = slots.to(gl.int64) * stride_om
        rows_t = hs.slice(T0, TC, dim=0)
        for j in gl.static_range(F // 32):
            g = _group(rows_t, 4 * j, LOAD, STORE)
            u = _group(rows_t, F // 8 + 4 * j, LOAD, STORE)
            q = _swiglu_q8(g, u, rw, limit)
            gl.store(out_ptr + rows + (col0 + 32 * j + col), q.to(gl.bfloat16),
                     mask=valid & (col >= 0))

    @gluon.jit
    def _group(rows_t, r0, LOAD: gl.constexpr, STORE: gl.constexpr):
        """Octets [r0, r0 + 4) of the chunk's tile (one group of 32 features) in STORE: the
        [TC, 4, 4, 2] (i, q) load becomes [TC, 4, 2, 4] (q, i), the same registers of each
        lane."""
        x = rows_t.slice(r0, 4, dim=1).load(LOAD)
        return gl.convert_layout(gl.permute(x, [0, 1, 3, 2]), STORE)

    @gluon.jit
    def _axis(n: gl.constexpr, dim: gl.constexpr, L4: gl.constexpr):
        """0 .. n - 1 along dimension ``dim`` of a 4-d tensor in layout L4 (size 1 in the
        others)."""
        if dim == 0:
            x = gl.arange(0, n, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, L4))))
            return gl.expand_dims(gl.expand_dims(gl.expand_dims(x, 1), 2), 3)
        elif dim == 1:
            x = gl.arange(0, n, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, L4))))
            return gl.expand_dims(gl.expand_dims(gl.expand_dims(x, 0), 2), 3)
        elif dim == 2:
            x = gl.arange(0, n, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, L4))))
            return gl.expand_dims(gl.expand_dims(gl.expand_dims(x, 0), 1), 3)
        else:
            x = gl.arange(0, n, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, L4))))
            return gl.expand_dims(gl.expand_dims(gl.expand_dims(x, 0), 1), 2)

    @gluon.jit
    def _swiglu_q8(g, u, rw, limit):
        """One group of g, u (bf16, the octet layout's [tokens, 4, 2, 4]: its 32 features
        along axes 1-3) and the tokens' routing weights rw ([tokens, 1, 1, 1]) -> h's Q8_32
        values (fp32):
        ``moe_swiglu.swiglu_h`` (ACT bf16: g and u hold bf16 values already), then
        ``quant_act.q8_32_groups`` over the features (a max: its bits in any order) and
        ``q8_32_values``."""
        g = gl.minimum(g.to(gl.float32), limit)
        u = gl.minimum(gl.maximum(u.to(gl.float32), -limit), limit)
        h = g / (1.0 + gl.exp(-g)) * u
        h = (rw * h).to(gl.bfloat16).to(gl.float32)
        amax = gl.abs(h)  # the in-lane axes first, then the four lanes
        amax = gl.max(gl.max(gl.max(amax, axis=3, keep_dims=True), axis=2, keep_dims=True),
                      axis=1, keep_dims=True)
        amax = gl.maximum(amax, 1e-4)
        bits = (amax * (1.0 / 448.0)).to(gl.int32, bitcast=True)
        exponent = (bits >> 23) & 0xFF
        e = exponent + ((bits & 0x7FFFFF) != 0).to(gl.int32)
        e = gl.where(exponent == 0xFF, 0xFF, e)
        inv_scale = ((254 - e) << 23).to(gl.float32, bitcast=True)
        y = gl.minimum(gl.maximum(h * inv_scale, -448.0), 448.0)
        q = y.to(gl.float8e4nv).to(gl.float32) * (e << 23).to(gl.float32, bitcast=True)
        return gl.where(e == 0xFF, float("nan"), q)
