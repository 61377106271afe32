"""The shared-memory-operand prefill expert GEMM (kernels/triton/moe_gluon_w4a16_ss.py) and its
warp-specialized form (moe_gluon_w4a16_ws.py) on CPU: their sm_90 compile gates. Gluon has no
interpreter: the kernels run on the GPU only (tests/gpu/test_moe_gluon_gpu.py::
test_w4a16_ss_gluon); their decode is the register-A kernel's
(tests/kernels/triton/test_moe_w4a16_prefill.py checks that bit logic).
"""

from __future__ import annotations

import pytest

from deepinfer.kernels.triton import moe_gluon_w4a16_ss as ss
from deepinfer.kernels.triton import moe_gluon_w4a16_ws as ws


def test_rows_tile_the_flash_projections():
    """Both expert projections of V4.1-Flash (2304 and 5120 output features) tile by 256 rows;
    64-row multiples that do not are refused."""
    assert ss.accepts([2304, 5120])
    assert not ss.accepts([2304, 5120 + 64])


@pytest.mark.skipif(not ss.HAS_GLUON, reason="needs triton's Gluon")
def test_w4a16_ss_compiles_for_sm90(sm90_compile):
    """sm_90 compile gate: both decodes, rings 2 and 3 deep, no spills, and per 128-K step two
    k16 wgmmas per group and token tile (the loops of one and of two tiles: 8 + 16), the
    decoded tile stored by stmatrix (no shuffles beyond the warpgroup index's broadcast)."""
    cases = ss.aot_cases()
    assert len(cases) == 3
    results = sm90_compile(cases)
    for case in cases:
        r = results[case["id"]]
        assert r["wgmma_count"] == 24, (case["id"], r["wgmma_count"])
        assert r["shfl"] <= 2, f"{case['id']}: {r['shfl']} shuffles"


@pytest.mark.skipif(not ws.HAS_GLUON, reason="needs triton's Gluon")
def test_w4a16_ws_compiles_for_sm90(sm90_compile):
    """sm_90 compile gate of the warp-specialized form: both decodes, two ring depths, 4 and 8
    decoder warps, no spills under the launch's register cap, the consumers' 24 wgmmas (8 +
    16)."""
    cases = ws.aot_cases()
    assert len(cases) == 4
    results = sm90_compile(cases)
    for case in cases:
        r = results[case["id"]]
        assert r["wgmma_count"] == 24, (case["id"], r["wgmma_count"])
        assert r["shfl"] <= 3, f"{case['id']}: {r['shfl']} shuffles"
