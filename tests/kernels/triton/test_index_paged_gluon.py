"""The indexer's paged scores in Gluon (kernels/triton/index_paged_gluon.py) on CPU.

Gluon has no interpreter: the kernel runs on the GPU only (tests/gpu/test_attention_side_gpu.py,
``PAGED_KERNEL = "gl"``). Here: the channel permutation that makes the MXFP4 PTX's outputs a
wgmma A operand (the PTX itself: tests/kernels/triton/test_moe_unpack_ptx.py), and the sm_90
compile gate (no shuffles between the shared-memory load, the decode and the A operand; no
spills).
"""

from __future__ import annotations

import pytest

from deepinfer.kernels.triton import index_paged_gluon as ipg


def test_channel_permutation_matches_the_register_reshape():
    """Quad lane q decodes bytes 4q..4q+3 of a group: output t (low / high nibble) element i
    is channel 8q + 2i + t, and the kernel's reshape puts it at column v = t + 2 q0 + 4 q1 +
    8 i0 + 16 i1; ``channel_permutation``[v] must be that channel, a permutation of 0..31."""
    perm = ipg.channel_permutation()
    assert sorted(perm.tolist()) == list(range(32))
    for q in range(4):
        for i in range(4):
            for t in range(2):
                v = t + 2 * (q & 1) + 4 * (q >> 1) + 8 * (i & 1) + 16 * (i >> 1)
                assert perm[v] == 8 * q + 2 * i + t, (q, i, t)


def test_layouts_tile_the_record_bytes():
    """``byte_layout`` holds each of a tile's 64 x 64 pair bytes exactly once (bases form a
    basis of the 12 index bits), and ``group_layout`` is its group-G slice."""
    if not ipg.HAS_GLUON:
        pytest.skip("needs triton's Gluon")
    lay = ipg.byte_layout()
    bases = [tuple(b) for b in lay.reg_bases + lay.lane_bases + lay.warp_bases]
    assert len(bases) == 12
    idx = {r * 64 + c for r, c in bases}
    assert idx == {1 << k for k in range(12)}  # one bit each: rows 0..63 x bytes 0..63
    g = ipg.group_layout()
    assert [tuple(b) for b in g.reg_bases] == [(0, 1), (0, 2), (8, 0)]


@pytest.mark.skipif(not ipg.HAS_GLUON, reason="needs triton's Gluon")
def test_index_paged_gl_compiles_for_sm90(sm90_compile):
    """sm_90 compile gate: the decoded records reach the wgmma A operand with no shuffles
    (the only layout conversions move block-table rows into the copy layouts), 8 wgmma (k16)
    per tile, no spills, at 32 and 64 index heads."""
    cases = ipg.aot_cases()
    results = sm90_compile(cases)
    for case in cases:
        r = results[case["id"]]
        assert r["wgmma_count"] == 8, (case["id"], r["wgmma_count"])
        # the 4 are the head sum's quad butterflies (2 per accumulator row pair)
        assert r["shfl"] <= 4, (case["id"], r["shfl"])
