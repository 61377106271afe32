"""The Gluon FP8 projection (kernels/triton/linear_wide.py) on CPU: its SM90 compile (Gluon has
no interpreter; tests/gpu/test_linear_wide_gpu.py runs it against the reference) and what it
accepts."""

from __future__ import annotations

import pytest
import torch

from deepinfer.kernels.triton import gemm_fp8, linear_wide

pytestmark = pytest.mark.skipif(not linear_wide.HAS_GLUON, reason="triton without Gluon")


def test_sm90_compile(sm90_compile):
    """Every launch class compiles for sm_90 with wgmma, within shared memory, without spills;
    the decoded weight reaches the wgmma A operand without a shuffle (its smem load layout is
    the register-A layout)."""
    cases = linear_wide.aot_cases()
    results = sm90_compile(cases)
    for case in cases:
        res = results[case["id"]]
        assert res["wgmma_count"] >= 1, case["id"]
        assert res["shfl"] == 0, f"{case['id']}: {res['shfl']} shuffles (a layout conversion)"


def test_accepts():
    w = gemm_fp8.pack_fp8_weight(torch.randn(256, 64) * 0.02)
    x = torch.zeros(200, 1, 64, dtype=torch.bfloat16)
    assert linear_wide.accepts(x, w, 256)
    assert linear_wide.accepts(x, w, 192)
    assert linear_wide.accepts(x, w, 128, warpgroups=2)
    assert not linear_wide.accepts(x, w, 192, warpgroups=2)  # O not whole programs
    assert not linear_wide.accepts(x, w, 96)
    assert not linear_wide.accepts(x.float(), w, 256)  # bf16 x only
    assert linear_wide.accepts(torch.zeros(4096, 1, 64, dtype=torch.bfloat16), w, 256)
    assert not linear_wide.accepts(torch.zeros(0, 1, 64, dtype=torch.bfloat16), w, 256)
    assert not linear_wide.accepts(torch.zeros(8, 1, 48, dtype=torch.bfloat16), w, 256)
    assert not linear_wide.accepts(x, torch.zeros(256, 64, dtype=torch.bfloat16), 256)


def test_wide_split_is_row_count_invariant_from_prefill_sizes():
    """Split-K fills the GPU below ``gemm_fp8.INVARIANT_MIN_ROWS`` rows and is off from there
    (a row's K sums in one order at any step size): wkv (O 512, K 5120) at 256 rows (8 programs)
    splits, at 1,024 / 4,096 (by waves 5 / 2) and 8,192 rows not."""
    lim = gemm_fp8.INVARIANT_MIN_ROWS

    def split(rows: int, out_features: int = 512, num_k: int = 5120) -> int:
        cfg = linear_wide.wide_config(rows, out_features)
        programs = out_features // (64 * cfg["WG"]) * -(-rows // cfg["BT"])
        return linear_wide.wide_split(rows, programs, num_k, cfg["BK"], cfg["waves"])

    assert split(256) == 8 and split(lim - 1) > 1
    assert gemm_fp8.split_k_for_waves(8 * 16, 5120, 64, 1, linear_wide.NUM_SMS) == 2  # 4,096
    for rows in (lim, 4096, 8192, 16384):
        assert split(rows) == 1 and split(rows, 1024) == 1, rows


def test_wide_config_two_warpgroups_from_enough_programs():
    """Two warpgroups per 256-row token tile only where the grid holds
    ``TWO_WG_MIN_PROGRAMS`` programs of 128 weight rows (from ``WIDE_TWO_WG_ROWS`` rows
    ``WIDE_TWO_WG_MIN_PROGRAMS``): the 4,096-row projections but wkv, not the decode sizes,
    never an O that 128 does not divide; only they issue the wgmmas first."""
    cfg = linear_wide.wide_config
    n = linear_wide.TWO_WG_MIN_PROGRAMS
    assert cfg(4096, 5120)["WG"] == 2 and cfg(4096, 5120)["STAGES"] == 4  # wo_b: 640 programs
    # from WIDE_TWO_WG_ROWS (4,096) rows already from 128 programs: wq_a (128) on two, wkv (64)
    # on one; below it the four waves: at 2,048 rows wq_a (64) and shared w1/w3 (144) on one
    assert linear_wide.WIDE_TWO_WG_ROWS == 4096
    assert cfg(4096, 1024)["WG"] == 2 and cfg(4096, 512)["WG"] == 1
    assert cfg(4096, 2304)["WG"] == 2 and cfg(2048, 2304)["WG"] == 1
    assert cfg(8192, 512)["WG"] == 2  # wkv at 8K-row steps: 128 programs
    assert cfg(4096, 1024, groups=8)["WG"] == 2  # wo_a: 8 groups of 1024
    assert cfg(256, 32768)["WG"] == 1  # decode: one token tile, 256 programs
    assert cfg(256, 128 * n)["WG"] == 2 and cfg(256, 128 * n - 128)["WG"] == 1
    assert cfg(4096, 5120 + 64)["WG"] == 1  # O % 128 != 0
    assert cfg(4096)["WG"] == 1  # no O given: the one-warpgroup launch
    assert cfg(128, 10 ** 6)["WG"] == 1  # below 256-row tiles: one warpgroup
    assert cfg(4096, 5120)["MMA_FIRST"] is linear_wide.MMA_FIRST is True
    assert not any(cfg(r, o)["MMA_FIRST"] for r, o in ((4096, 512), (256, 32768), (64, 5120)))
    w = gemm_fp8.pack_fp8_weight(torch.randn(256, 64) * 0.02)
    assert linear_wide.accepts(torch.zeros(4096, 1, 64, dtype=torch.bfloat16), w, 256,
                               cfg(4096, 256)["WG"])


def test_operand_layout():
    """64 rows per warpgroup: 2 warp bases per warpgroup of 4 warps, one more per doubling."""
    for wg, warps in ((1, [[16, 0], [32, 0]]), (2, [[16, 0], [32, 0], [64, 0]]),
                      (4, [[16, 0], [32, 0], [64, 0], [128, 0]])):
        layout = linear_wide.operand_layout(wg)
        assert layout.warp_bases == warps and layout.shape == [64 * wg, 32]
