"""The shared-memory-operand bf16 projection (kernels/triton/linear_ss.py) on CPU: its SM90
compile (Gluon has no interpreter; tests/gpu/test_linear_ss_gpu.py runs it against
``linear_wide`` and the reference) and what it accepts."""

from __future__ import annotations

import pytest
import torch

from deepinfer.kernels.triton import linear_ss

pytestmark = pytest.mark.skipif(not linear_ss.HAS_GLUON, reason="triton without Gluon")


def test_sm90_compile(sm90_compile):
    """Every tile compiles for sm_90 within shared memory and without spills; a K step is
    BK / 16 wgmmas (k16 each) of the consumer warpgroups."""
    cases = linear_ss.aot_cases()
    results = sm90_compile(cases)
    for case in cases:
        res = results[case["id"]]
        assert res["wgmma_count"] == case["constexprs"]["BK"] // 16, (case["id"], res)


def test_accepts():
    x = torch.zeros(200, 1, 128, dtype=torch.bfloat16)
    w = torch.zeros(512, 128, dtype=torch.bfloat16)
    assert linear_ss.accepts(x, w, 512)
    assert not linear_ss.accepts(x, w, 512, {"BK": 96})  # K not whole steps
    assert linear_ss.accepts(x, w[:256], 256)
    assert linear_ss.accepts(x, w[:384], 384)  # ss_config: N 128 tiles
    assert not linear_ss.accepts(x, w[:384], 384, {"BN": 256})  # O not whole 256-row tiles
    assert not linear_ss.accepts(x.float(), w, 512)  # bf16 x only
    assert not linear_ss.accepts(x, w.float(), 512)  # bf16 weight only
    assert not linear_ss.accepts(x[:0], w, 512)
    assert not linear_ss.accepts(torch.zeros(8, 2, 128, dtype=torch.bfloat16), w, 512)
    assert linear_ss.accepts(torch.zeros(8, 2, 128, dtype=torch.bfloat16), w, 256)  # grouped
    assert not linear_ss.accepts(x, torch.zeros(128, 512, dtype=torch.bfloat16).t(), 512)  # K-major


def test_ss_config_keeps_every_sm_busy():
    """N 256 tiles unless half the SMs would get none (wkv's 512 outputs at 4K rows: 64 tiles
    of 256; wq_a's 1,024: 128 keep 256); O not whole 256-row tiles: 128."""
    assert linear_ss.ss_config(4096, 32768)["BN"] == 256
    assert linear_ss.ss_config(4096, 5120)["BN"] == 256  # 32 x 20 tiles
    assert linear_ss.ss_config(4096, 512)["BN"] == 128
    assert linear_ss.ss_config(4096, 1024)["BN"] == 256
    assert linear_ss.ss_config(4096, 1024, groups=8)["BN"] == 256
    assert linear_ss.ss_config(8192, 384)["BN"] == 128
