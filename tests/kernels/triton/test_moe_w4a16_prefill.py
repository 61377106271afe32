"""The bf16 prefill expert GEMM over W4A8-order MXFP4 weights
(kernels/triton/moe_gluon_w4a16_prefill.py, its bit logic in mxfp4_w4a8_bf16.py) on CPU.

Gluon has no interpreter: the kernel runs on the GPU only (tests/gpu/test_moe_gluon_gpu.py).
Here: the decode's bit logic (its torch twin, the PTX's operations one for one) against the
checkpoint's values, the K permutation that makes the decoded registers a wgmma A operand,
the token gather (interpreter) against torch, and the sm_90 compile gate (no shuffles between
the shared-memory load, the decode and the wgmma; no spills).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from deepinfer.kernels.mxfp4_w4a8_order import to_w4a8_words
from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf
from deepinfer.kernels.triton import mxfp4_w4a8_bf16


def _weights(rows: int, k: int, scale_lo: int, scale_hi: int, seed: int = 0):
    """Checkpoint-order MXFP4 bytes (rows, K/2) with every nibble in row 0, their scale bytes
    (rows, K/32) and the dequantized values (rows, K) fp32."""
    from deepinfer.kernels.formats import dequantize_fp4_weight

    g = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (rows, k // 2), dtype=torch.uint8, generator=g)
    packed[0, :16] = torch.arange(16, dtype=torch.uint8) * 17  # every nibble, both halves
    scale = torch.randint(scale_lo, scale_hi + 1, (rows, k // 32), dtype=torch.uint8,
                          generator=g)
    values = dequantize_fp4_weight(packed.view(torch.int8), scale).float()
    return packed, scale, values


def _decoded_operand(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What the kernel's A operands hold, from the twin: (rows, K) with column 32 G + v of
    each 128-K step = the decoded value the wgmma multiplies with token column v."""
    rows, half = packed.shape
    k = half * 2
    words = to_w4a8_words(packed).view(torch.int32).to(torch.int64)  # a row's words
    words = words.reshape(rows, k // 128, 4, 4)  # row, step, quad lane q, group G
    s = scale.to(torch.int64).reshape(rows, k // 128, 4)[:, :, None, :].expand(-1, -1, 4, -1)
    vals = mxfp4_w4a8_bf16.decode_twin(words, s)  # (rows, step, q, G, 8): a[0..3], b[0..3]
    # output element (t, i) of quad lane q -> column v = i0 + 2 q0 + 4 q1 + 8 i1 + 16 t
    vals = vals.reshape(rows, k // 128, 2, 2, 4, 2, 2, 2)  # q1 q0 G t i1 i0
    vals = vals.permute(0, 1, 4, 5, 6, 2, 3, 7)  # row step G t i1 q1 q0 i0
    return vals.reshape(rows, k)


@pytest.mark.parametrize("scale_lo,scale_hi", [(100, 128), (60, 200)])
def test_decode_twin_and_permutation_give_the_weights(scale_lo, scale_hi):
    """Column 32 G + v of the decoded operand = the weight at K = 32 G + K_off(v), bit for
    bit, for every e2m1 value; scale bytes past 128 need the two-multiply form (the twin
    computes the exact product, as both PTX forms do in range)."""
    packed, scale, values = _weights(6, 512, scale_lo, scale_hi)
    got = _decoded_operand(packed, scale)
    perm = mxfp4_w4a8_bf16.k_permutation()
    assert sorted(perm.tolist()) == list(range(32))
    want = values.reshape(6, -1, 32)[:, :, perm].reshape(6, -1)
    assert torch.equal(got, want)


@pytest.mark.parametrize("one_mul", [True, False])
def test_decode_ptx_matches_the_twin(one_mul):
    """The kernel's inline PTX itself (``EXTRACT``, then ``SCALE_ONE_MUL`` / ``SCALE_TWO_MUL``
    on its four registers, emulated on CPU by ``ptx_subset``) gives the twin's values bit for
    bit: every nibble in every position of a word, random words, scale bytes across the forms'
    ranges (the multiplier as ``scale_multiplier`` builds it, as the kernel does)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from ptx_subset import bf16_to_float, run

    g = torch.Generator().manual_seed(7)
    words = [sum(n << (4 * j) for j in range(8)) for n in range(16)]  # every nibble everywhere
    words += torch.randint(0, 2**32, (48,), dtype=torch.int64, generator=g).tolist()
    scales = [1, 100, 119, 127, 128] + ([] if one_mul else [129, 200, 254])
    scale_asm = mxfp4_w4a8_bf16.SCALE_ONE_MUL if one_mul else mxfp4_w4a8_bf16.SCALE_TWO_MUL
    for w in words:
        bits = run(mxfp4_w4a8_bf16.EXTRACT, {4: w}, 4)
        for e in scales:
            m = mxfp4_w4a8_bf16.scale_multiplier(e, one_mul)
            halves = run(scale_asm, {8 + i: b for i, b in enumerate(bits)} | {12: m}, 8)
            got = [bf16_to_float(h) for h in halves]
            want = mxfp4_w4a8_bf16.decode_twin(torch.tensor([w]), torch.tensor([e]))[0].tolist()
            assert got == want, (hex(w), e)


def test_shapes_it_accepts():
    """Warpgroups per program shrink until 64 x WG rows tile every projection (the slice:
    2304 and 5120 take 2); K must be a multiple of 128 and O of 64, else ``run_experts``
    keeps the FP8 prefill kernel."""
    from deepinfer.kernels.triton.moe_experts import ExpertWeights

    assert pf.fitting_warpgroups([2304, 5120], 2) == 2
    assert pf.fitting_warpgroups([2304, 5120], 4) == 4  # 2304 = 9 x 256
    assert pf.fitting_warpgroups([2432, 5120], 4) == 2  # 2432 = 19 x 128
    assert pf.fitting_warpgroups([192, 5120], 2) == 1
    assert pf.fitting_warpgroups([96, 5120], 2) is None

    def stack(o, k):
        return ExpertWeights(torch.zeros(2, o, k // 2, dtype=torch.int8),
                             torch.zeros(2, o, k // 32, dtype=torch.uint8), "mxfp4")

    assert pf.accepts(stack(2304, 5120), stack(2304, 5120), stack(5120, 2304))
    assert pf.accepts(stack(192, 256), stack(192, 256), stack(256, 192)) is False  # K 192
    assert pf.accepts(stack(96, 256), stack(96, 256), stack(256, 128)) is False  # O 96


def test_gather_tokens_matches_torch():
    """``gather_tokens`` (interpreter): slot i = x[pairs[i] // div] permuted by K_off inside
    each 32-K group; padding slots are left as they were (never read into a stored column)."""
    torch.manual_seed(3)
    rows, k, div = 7, 640, 3  # K not a multiple of the loop step: the last step is masked
    x = torch.randn(rows, k).to(torch.bfloat16)
    num_pairs = rows * div
    # 11 slots: a program of only padding (slots 8-10 after 8 per program) beside a mixed one
    pairs = torch.tensor([0, 5, 20, 13, num_pairs, 2, num_pairs, 9] + [num_pairs] * 3,
                         dtype=torch.int32)
    sentinel = torch.full((pairs.numel(), k), 7.0, dtype=torch.bfloat16)
    got = pf.gather_tokens(x, pairs, num_pairs, div, out=sentinel.clone())
    perm = mxfp4_w4a8_bf16.k_permutation()
    valid = [i for i, p in enumerate(pairs.tolist()) if p < num_pairs]
    assert len(valid) == 6
    for i in set(range(pairs.numel())) - set(valid):  # padding slots untouched
        assert torch.equal(got[i], sentinel[i]), i
    for i in valid:
        want = x[pairs[i] // div].reshape(-1, 32)[:, perm].reshape(-1)
        assert torch.equal(got[i], want), i


@pytest.mark.skipif(not pf.HAS_GLUON, reason="needs triton's Gluon")
def test_w4a16_prefill_compiles_for_sm90(sm90_compile):
    """sm_90 compile gate: the decoded weights reach the wgmma A operand with no shuffles (the
    second accumulator of 3 / 4 quarters reads the same registers), 8 wgmma (k16) per 128-K
    step and accumulator in each N's loop (PARTS 2: N = BM / 2, BM; 4: BM / 4, BM / 2, BM / 2 +
    BM / 4, BM; 8 at BM 128: 16, 32, 32 + 16, 64, 64 + 16, 64 + 32, 128; REP 2: twice that),
    no spills, for 64 / 128 pairs per program, both decodes, 1, 2 warpgroups per program and
    one warpgroup of two A fragments."""
    cases = [c for c in pf.aot_cases() if c["kernel"] == "_w4a16_prefill_kernel"]
    gather = [c for c in pf.aot_cases() if c["kernel"] == "_gather_tokens_kernel"]
    assert len(cases) == 9 and len(gather) == 1
    results = sm90_compile(cases + gather)
    for case in cases:
        r = results[case["id"]]
        assert r["shfl"] == 0, f"{case['id']}: {r['shfl']} shuffles (the layouts do not line up)"
        # 8 per 128-K step and accumulator: loops of 1, 2, 5 (4 + the second accumulator) and
        # 10 (7 + three second accumulators)
        rep = case["constexprs"]["REP"]  # A fragments per warpgroup: that many wgmmas per k16
        assert r["wgmma_count"] == rep * {1: 8, 2: 16, 4: 40, 8: 80}[
            case["constexprs"]["PARTS"]], \
            (case["id"], r["wgmma_count"])


@pytest.mark.skipif(not pf.HAS_GLUON, reason="needs triton's Gluon")
def test_w4a16_prefill_ws_compiles_for_sm90(sm90_compile):
    """sm_90 compile gate of the producer-warp kernel (``moe_gluon_w4a16_prefill_ws``): the
    base kernel's wgmma count per loop (PARTS 4 or 8, times REP), no spills under its launch
    register cap (two programs per SM at one consumer warpgroup; two warpgroups of two A
    fragments: 256 rows from two weight boxes a step), and the one shuffle the
    warp-specialized dispatch makes (the warp index), none in the data path — but the GATED
    epilogue's group maxima (a group on four lanes: two shuffles a group; none in the K
    loop); ``ROW_STORES``' 16-byte stores take no shuffle either."""
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as ws

    cases = ws.aot_cases()
    assert len(cases) == 10 and sum(c["constexprs"]["GATED"] for c in cases) == 3
    assert sum(c["constexprs"]["ROW_STORES"] for c in cases) == 2  # the down GEMM at BM 128, 64
    results = sm90_compile(cases)
    for case in cases:
        r = results[case["id"]]
        if not case["constexprs"]["GATED"]:
            assert r["shfl"] == 1, f"{case['id']}: {r['shfl']} shuffles"
        else:  # the epilogue is there (its group maxima)
            assert r["shfl"] > 1, f"{case['id']}: no epilogue"
        per_rep = {4: 40, 8: 80}[case["constexprs"]["PARTS"]]
        assert r["wgmma_count"] == case["constexprs"]["REP"] * per_rep, \
            (case["id"], r["wgmma_count"])
        wg = case["num_warps"] // 4
        if r["regs"] is not None:  # cuobjdump present
            assert r["regs"] <= ws.launch_regs(wg), (case["id"], r["regs"])
    assert ws.launch_regs(1) == 128 and ws.launch_regs(2) == 168


def test_program_shape_by_pairs_per_expert(monkeypatch):
    """Up to ``REP_MAX_PAIRS_PER_EXPERT`` pairs per expert (a 4K-token step of V4.1-Flash: 64)
    a program is one warpgroup of two A fragments, above it (8K: 128) ``warpgroups`` of one;
    an explicit rep wins; projections that 128 rows do not tile keep one fragment; 0 turns
    the two-fragment programs off."""
    monkeypatch.setattr(pf, "REP_MAX_PAIRS_PER_EXPERT", 64)
    flash = [2304, 5120]
    assert pf.program_shape(flash, 4096 * 6 / 384, 2) == (1, 2)
    assert pf.program_shape(flash, 1024 * 6 / 384, 2) == (1, 2)
    assert pf.program_shape(flash, 8192 * 6 / 384, 2) == (2, 1)
    assert pf.program_shape(flash, 8192 * 6 / 384, 2, rep=2) == (1, 2)
    assert pf.program_shape(flash, 16.0, 2, rep=1) == (2, 1)
    assert pf.program_shape([2304, 64 * 81], 16.0, 1) == (1, 1)
    monkeypatch.setattr(pf, "REP_MAX_PAIRS_PER_EXPERT", 0)
    assert pf.program_shape(flash, 16.0, 2) == (2, 1)


def test_part_tiles_cover_the_used_parts_in_power_of_two_tiles():
    """``part_tiles``, the kernels' dispatch by used parts: one power-of-two tile or two that
    cover exactly the used rows, else the whole block; the quarters as the kernels ran them
    before eighths existed (BM / 4, BM / 2, BM / 2 + BM / 4, BM); parts 8 only from BM 128."""
    for bm in (64, 128, 256):
        for parts in (1, 2, 4, 8):
            for used in range(1, parts + 1):
                bn, bn2 = pf.part_tiles(parts, used, bm)
                rows = used * bm // parts
                for t in (bn, bn2):
                    assert t & (t - 1) == 0, (parts, used, bn, bn2)  # powers of two (or 0)
                assert bn + bn2 == rows or (bn, bn2) == (bm, 0), (parts, used, bn, bn2)
                assert bn + bn2 >= rows and bn > bn2
    assert [pf.part_tiles(4, u, 128) for u in (1, 2, 3, 4)] == [(32, 0), (64, 0), (64, 32),
                                                                (128, 0)]
    assert [pf.part_tiles(8, u, 128) for u in range(1, 9)] == [
        (16, 0), (32, 0), (32, 16), (64, 0), (64, 16), (64, 32), (128, 0), (128, 0)]
    assert pf.launch_parts(8, 128) == 8 and pf.launch_parts(8, 64) == 4
    assert pf.launch_parts(2, 64) == 2
    with pytest.raises(AssertionError, match="parts 3"):
        pf.launch_parts(3, 128)


@pytest.mark.skipif(not pf.HAS_GLUON, reason="needs triton's Gluon")
def test_the_kernels_eighths_tables_are_part_tiles():
    """The kernels' eighths dispatch (``_EIGHTHS_BOX`` / ``_EIGHTHS_BN2`` / ``_EIGHTHS_BOX2``,
    read by both kernels' static loops) is ``part_tiles(8, u, BM)`` for u = 1 .. 7, each tile
    from the token box of its own rows (descriptor i: BM >> i rows, as the launchers pass them;
    ``eighth_rows`` the fourth), the second box the first's when there is no second tile."""
    box, bn2, box2 = (t.value for t in (pf._EIGHTHS_BOX, pf._EIGHTHS_BN2, pf._EIGHTHS_BOX2))
    for bm in (128, 256):
        assert pf.eighth_rows(bm) == bm >> 3
        for u in range(1, 8):
            tiles = (bm >> box[u - 1], bn2[u - 1] * (bm // 8))
            assert tiles == pf.part_tiles(8, u, bm), (bm, u, tiles)
            assert (bm >> box2[u - 1]) == (tiles[1] or tiles[0]), (bm, u)
