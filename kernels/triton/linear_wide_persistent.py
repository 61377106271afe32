"""``linear_wide`` as a persistent kernel (Gluon, SM90): one program per SM slot walks the
tiles program_id, + num_programs, ... and issues the next tile's first ring stages before it
stores the current tile's output — the same operands, products and summation order per tile,
so the same bits as ``linear_wide`` (reference ``linear.linear``).

    out[t, g, o] = sum_k w[g * O + o, k] * x[t, g, k]

Why: at 4,096 rows ``wide_config`` runs the large projections as programs of two warpgroups
that take a whole SM each; a program with a short K loop pays its ring's fill (TMA latency,
the first decode) and its store with the tensor cores idle. wq_b (K 1,024: 16 steps of 64)
ran at 554 µs against 275 GFLOP (round 101a): ~18 µs a program for 9-11 µs of wgmma work
at the bf16 rate. Here a tile's first ``STAGES - 1`` steps are in flight while the previous
tile's accumulator is converted and stored, and no program launch sits between two tiles.
Off by default (``linear_wide`` config ``PERSISTENT``; ``bench/gemm_decode.py`` variant
``glp``); prepared in session 33 without a GPU: compiled for sm_90 on the CPU only
(tests/kernels/triton/test_linear_wide.py), bits against ``linear_wide`` in
tests/gpu/test_linear_wide_gpu.py.

The ring is the base kernel's (``linear_wide.issue_at``), addressed by a program-wide step
position p (tile after tile): slot p % STAGES, phase (p // STAGES) & 1, so each slot's
barrier completes once per use in order across tiles. Shapes and contract:
``linear_wide.linear_wide``.
"""

from __future__ import annotations

from typing import Any

from deepinfer.kernels.triton import linear_wide as base

HAS_GLUON = base.HAS_GLUON
operand_layout = base.operand_layout  # the weight tile's register layout (compile gate)
SHARED_BYTES_PER_SM = 227 * 1024  # H200 / H100: the most one SM's programs may hold

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        mbarrier,
        warpgroup_mma_wait,
    )

    from deepinfer.kernels.triton.moe_gluon import cta_barrier

    @gluon.jit
    def _tile(t, O, K, k_per_split, NUM_PID, SPLIT_K: gl.constexpr, T_TILES: gl.constexpr,
              BO: gl.constexpr, BT: gl.constexpr, BK: gl.constexpr):
        """Tile t in the base grid's order (its program_id(0) fastest, then the split, then
        the group): (output tile, split, group, first weight row, first token, first K
        column, K steps)."""
        pid = t % NUM_PID
        rest = t // NUM_PID
        split = rest % SPLIT_K
        group = rest // SPLIT_K
        pid_o = pid // T_TILES
        k_begin = split * k_per_split
        num_steps = (gl.minimum(k_begin + k_per_split, K) - k_begin) // BK
        return pid_o, split, group, group * O + pid_o * BO, (pid % T_TILES) * BT, k_begin, \
            num_steps

    @gluon.jit
    def _fill(w_desc, x_desc, w_s, x_s, bars, pos, row0, tok0, k_begin, x_col0, num_steps,
              STAGES: gl.constexpr, BO: gl.constexpr, BT: gl.constexpr, BK: gl.constexpr):
        """A tile's first STAGES - 1 steps into the slots from position pos."""
        for b in gl.static_range(STAGES - 1):
            base.issue_at(w_desc, x_desc, w_s, x_s, bars, pos + b, row0, tok0, k_begin,
                          x_col0, b, num_steps, STAGES, BO, BT, BK)

    @gluon.jit
    def _next_operands_at(w_s, ready, s_ptrs, s_ok, n0, n1, i, pos0, num_steps,
                          STAGES: gl.constexpr, KSUB: gl.constexpr, LW: gl.constexpr,
                          LA: gl.constexpr):
        """``linear_wide.next_operands`` with the tile's steps at ring positions pos0, ...."""
        nxt = gl.minimum(i + 1, num_steps - 1)
        m0, m1 = base._scales(s_ptrs, s_ok, i + 2, num_steps, KSUB)
        p = pos0 + nxt
        mbarrier.wait(ready.index(p % STAGES), (p // STAGES) & 1)
        b0, b1 = base._operands(w_s, p % STAGES, n0, n1, KSUB, LW, LA)
        return b0, b1, m0, m1

    @gluon.jit
    def _linear_wide_persistent_kernel(x_desc, w_desc, ws_ptr, out_ptr, M, O, K, W_ROWS,
                                       k_per_split, split_stride, stride_wsr, stride_om,
                                       stride_og, NUM_PID, NUM_TILES,
                                       SPLIT_K: gl.constexpr, T_TILES: gl.constexpr,
                                       BT: gl.constexpr, BK: gl.constexpr,
                                       STAGES: gl.constexpr, LW: gl.constexpr,
                                       VEC_STORE: gl.constexpr, num_warps: gl.constexpr):
        # ``linear_wide._linear_wide_kernel``'s arguments and K loop; NUM_PID: its grid's
        # first dimension (output tiles x token tiles), NUM_TILES: its whole grid
        BO: gl.constexpr = 16 * num_warps
        KSUB: gl.constexpr = BK // 32
        gl.static_assert(KSUB == 1 or KSUB == 2, "BK must be 32 or 64")
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                       warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BT, 16])
        LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        w_s = gl.allocate_shared_memory(gl.uint8, [STAGES, BO, BK], w_desc.layout)
        x_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, BK], x_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for b in gl.static_range(STAGES):
            mbarrier.init(bars.index(b), count=1)

        pid_o, split, group, row0, tok0, k_begin, num_steps = _tile(
            gl.program_id(0), O, K, k_per_split, NUM_PID, SPLIT_K, T_TILES, BO, BT, BK)
        _fill(w_desc, x_desc, w_s, x_s, bars, 0, row0, tok0, k_begin, group * K + k_begin,
              num_steps, STAGES, BO, BT, BK)
        pos = 0  # the ring position of the current tile's first step
        for tile in range(gl.program_id(0), NUM_TILES, gl.num_programs(0)):
            s_ptrs, s_ok = base.scale_pointers(ws_ptr, row0, k_begin, W_ROWS, stride_wsr, BO,
                                               LW)
            s0, s1 = base._scales(s_ptrs, s_ok, 0, num_steps, KSUB)
            n0, n1 = base._scales(s_ptrs, s_ok, 1, num_steps, KSUB)
            mbarrier.wait(bars.index(pos % STAGES), (pos // STAGES) & 1)
            a0, a1 = base._operands(w_s, pos % STAGES, s0, s1, KSUB, LW, LA)
            acc = gl.zeros([BO, BT], gl.float32, MMA)
            for i in range(num_steps):
                # every warp is past step i - 1: its slot, the one refilled below, is free
                cta_barrier()
                base.issue_at(w_desc, x_desc, w_s, x_s, bars, pos + i + STAGES - 1, row0,
                              tok0, k_begin, group * K + k_begin, i + STAGES - 1, num_steps,
                              STAGES, BO, BT, BK)
                acc = base.issue_mmas(a0, a1, x_s.index((pos + i) % STAGES), acc, KSUB)
                b0, b1, n0, n1 = _next_operands_at(w_s, bars, s_ptrs, s_ok, n0, n1, i, pos,
                                                   num_steps, STAGES, KSUB, LW, LA)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                a0, a1 = b0, b1
            pos += num_steps
            # the next tile's first steps go out before this tile's store (none past the
            # last tile: zero steps); every warp is done with this tile's slots first
            out_o, out_split, out_group, out_tok0 = pid_o, split, group, tok0
            nxt = tile + gl.num_programs(0)
            pid_o, split, group, row0, tok0, k_begin, num_steps = _tile(
                nxt, O, K, k_per_split, NUM_PID, SPLIT_K, T_TILES, BO, BT, BK)
            num_steps = num_steps * (nxt < NUM_TILES).to(gl.int32)
            cta_barrier()
            _fill(w_desc, x_desc, w_s, x_s, bars, pos, row0, tok0, k_begin,
                  group * K + k_begin, num_steps, STAGES, BO, BT, BK)
            if VEC_STORE and SPLIT_K == 1:
                base.store_vec(acc, out_ptr, out_o * BO, out_tok0, out_group, M, O,
                               stride_om, stride_og, BO, BT, num_warps)
            else:
                base.store_tile(acc, out_ptr, out_o * BO, out_tok0, out_split, out_group, M,
                                O, split_stride, stride_om, stride_og, SPLIT_K, T_TILES, BO,
                                BT, MMA)
        for b in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(b))


def ring_events(tile_steps: list[int], stages: int) -> list[tuple[str, int]]:
    """The ring operations of one program over tiles of ``tile_steps`` K steps, in the kernel's
    program order (its host twin, for the CPU test of the ring's positions): ("issue", p) for
    each TMA that is not predicated off (position p: slot p % stages, the barrier's
    (p // stages)-th completion) and ("wait", p) for each barrier wait. A wait at p needs
    exactly p // stages + 1 issues of its slot before it; an issue at p exactly p // stages."""
    events: list[tuple[str, int]] = []

    def fill(pos: int, num_steps: int) -> None:
        events.extend(("issue", pos + b) for b in range(stages - 1) if b < num_steps)

    if tile_steps:
        fill(0, tile_steps[0])
    pos = 0
    for t, num_steps in enumerate(tile_steps):
        events.append(("wait", pos))  # the tile's first operands
        for i in range(num_steps):
            if i + stages - 1 < num_steps:
                events.append(("issue", pos + i + stages - 1))
            events.append(("wait", pos + min(i + 1, num_steps - 1)))  # the next operands
        pos += num_steps
        fill(pos, tile_steps[t + 1] if t + 1 < len(tile_steps) else 0)
    return events


def shared_bytes(warpgroups: int, bt: int, bk: int, stages: int, vec_store: bool) -> int:
    """A program's shared memory, an upper bound of the compiled kernel's (the compile gate
    checks it): its ring (weight tile [64 WG, BK] bytes and token tile [BT, BK] bf16 a stage;
    barriers) and, with ``vec_store``, the layout conversion's scratch (sm_90 with triton 3.6:
    2 KB at one warpgroup, 8 KB at two — the compiler converts in rounds)."""
    return stages * (64 * warpgroups * bk + 2 * bt * bk) + 1024 + \
        (2048 * warpgroups * warpgroups if vec_store else 0)


def vec_store(warpgroups: int, bt: int, bk: int, stages: int, split_k: int) -> bool:
    """Whether a launch stores through the blocked layout: no split-K, and its programs per
    SM the same with the scratch as without."""
    return split_k == 1 and programs_per_sm(warpgroups, bt, bk, stages, True) == \
        programs_per_sm(warpgroups, bt, bk, stages, False)


def programs_per_sm(warpgroups: int, bt: int, bk: int, stages: int,
                    vec_store: bool = False) -> int:
    """Resident programs per SM of a launch: its shared memory (``shared_bytes``) against the
    SM's, at most 2 (one at two warpgroups: ``linear_wide``'s two-warpgroup launch holds an
    SM)."""
    need = shared_bytes(warpgroups, bt, bk, stages, vec_store)
    return max(1, min(2 if warpgroups == 1 else 1, SHARED_BYTES_PER_SM // need))


def aot_cases() -> list[dict[str, Any]]:
    """SM90 compile-gate cases (tests/kernels/triton/test_linear_wide.py): the 4,096-row
    launches of ``wide_config`` (two warpgroups, BT 256, BK 64, 4 stages, both stores; one
    warpgroup, 3 stages), split and not; wgmma, no spills."""
    cases = []
    for wg, bt, bk, stages, split_k, vec in ((2, 256, 64, 4, 1, True), (2, 256, 64, 4, 1, False),
                                             (1, 256, 64, 3, 1, True), (1, 256, 64, 3, 1, False),
                                             (1, 128, 64, 4, 2, False)):
        cases.append({
            "id": f"linear_wide_persistent_wg{wg}_bt{bt}_bk{bk}_s{stages}_split{split_k}"
                  + ("_vec" if vec else ""),
            "gluon": True, "module": __name__, "kernel": "_linear_wide_persistent_kernel",
            "signature": {"x_desc": f"tma:bf16:{2 * bk}:{bt}x{bk}",
                          "w_desc": f"tma:u8:{bk}:{64 * wg}x{bk}",
                          "ws_ptr": "*u8", "out_ptr": "*fp32" if split_k > 1 else "*bf16",
                          "M": "i32", "O": "i32", "K": "i32", "W_ROWS": "i32",
                          "k_per_split": "i32", "split_stride": "i32", "stride_wsr": "i32",
                          "stride_om": "i32", "stride_og": "i32", "NUM_PID": "i32",
                          "NUM_TILES": "i32"},
            "constexprs": {"SPLIT_K": split_k, "T_TILES": 16, "BT": bt, "BK": bk,
                           "STAGES": stages, "LW": {"call": "operand_layout", "args": [wg]},
                           "VEC_STORE": vec, "num_warps": 4 * wg},
            "num_warps": 4 * wg, "num_stages": 1, "expect_wgmma": True, "no_spill": True,
            "divisible": ["O", "K", "k_per_split"]})
    return cases
