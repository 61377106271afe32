"""The Gluon FP8 projection (kernels/triton/linear_wide.py) on CPU: its SM90 compile (Gluon has
no interpreter; tests/gpu/test_linear_wide_gpu.py runs it against the reference) and what it
accepts."""

from __future__ import annotations

import pytest
import torch

from deepinfer.kernels.triton import gemm_fp8, linear_wide, linear_wide_persistent, linear_wide_ws

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


def test_sm90_compile_warp_specialized(sm90_compile):
    """The warp-specialized variant (prepared, off) compiles for sm_90 at every token tile
    within its launch's register cap (``maxnreg``), without spills or layout shuffles."""
    cases = linear_wide_ws.aot_cases()
    results = sm90_compile(cases)
    for case in cases:
        res = results[case["id"]]
        # one shuffle: the partition dispatch broadcasts the warp id (no layout conversion)
        assert res["wgmma_count"] >= 1 and res["shfl"] <= 1, (case["id"], res)


def test_sm90_compile_persistent(sm90_compile):
    """The persistent variant (prepared in session 33, off) compiles for sm_90 at the 4,096-row
    launches with wgmma, without spills or layout shuffles (the vector store's conversion goes
    through shared memory), within ``shared_bytes`` — the host's count for programs per SM."""
    cases = linear_wide_persistent.aot_cases()
    results = sm90_compile(cases)
    for case in cases:
        res = results[case["id"]]
        c = case["constexprs"]
        assert res["wgmma_count"] >= 1, (case["id"], res)
        assert c["VEC_STORE"] or res["shfl"] == 0, (case["id"], res)
        bound = linear_wide_persistent.shared_bytes(case["num_warps"] // 4, c["BT"], c["BK"],
                                                    c["STAGES"], c["VEC_STORE"])
        assert res["shared"] <= bound, (case["id"], res["shared"], bound)


def test_persistent_programs_per_sm_and_store():
    """Two resident programs of one warpgroup where their shared memory fits an SM's, one of
    two warpgroups (which hold an SM, as linear_wide's launch); the vector store where it keeps
    the programs per SM and there is no split-K."""
    lwp = linear_wide_persistent
    assert lwp.programs_per_sm(1, 256, 64, 3) == 2 == lwp.programs_per_sm(1, 256, 64, 3, True)
    assert lwp.programs_per_sm(1, 256, 64, 4) == 1  # 2 x 145 KB: no
    assert lwp.programs_per_sm(2, 256, 64, 4) == 1 == lwp.programs_per_sm(2, 256, 64, 4, True)
    assert lwp.programs_per_sm(1, 64, 64, 4) == 2
    assert lwp.vec_store(2, 256, 64, 4, 1) and lwp.vec_store(1, 256, 64, 3, 1)
    assert not lwp.vec_store(2, 256, 64, 4, 3)  # split-K: fp32 partials, the base store


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
    ``TWO_WG_MIN_PROGRAMS`` programs of 128 weight rows: the large 4,096-row projections, not
    wq_a / wkv there, not the decode sizes, never an O that 128 does not divide."""
    cfg = linear_wide.wide_config
    n = linear_wide.TWO_WG_MIN_PROGRAMS
    assert cfg(4096, 5120)["WG"] == 2 and cfg(4096, 5120)["STAGES"] == 4  # wo_b: 640 programs
    assert cfg(4096, 1024)["WG"] == 1 and cfg(4096, 512)["WG"] == 1  # wq_a, wkv: 128, 64
    assert cfg(4096, 1024, groups=8)["WG"] == 2  # wo_a: 8 groups of 1024
    assert cfg(256, 32768)["WG"] == 1  # decode: one token tile, 256 programs
    assert cfg(256, 128 * n)["WG"] == 2 and cfg(256, 128 * n - 128)["WG"] == 1
    assert cfg(4096, 5120 + 64)["WG"] == 1  # O % 128 != 0
    assert cfg(4096)["WG"] == 1  # no O given: the one-warpgroup launch
    assert cfg(128, 10 ** 6)["WG"] == 1  # below 256-row tiles: one warpgroup
    w = gemm_fp8.pack_fp8_weight(torch.randn(256, 64) * 0.02)
    assert linear_wide.accepts(torch.zeros(4096, 1, 64, dtype=torch.bfloat16), w, 256,
                               cfg(4096, 256)["WG"])


def test_operand_layout():
    """64 rows per warpgroup: 2 warp bases per warpgroup of 4 warps, one more per doubling."""
    for wg, warps in ((1, [[16, 0], [32, 0]]), (2, [[16, 0], [32, 0], [64, 0]]),
                      (4, [[16, 0], [32, 0], [64, 0], [128, 0]])):
        layout = linear_wide.operand_layout(wg)
        assert layout.warp_bases == warps and layout.shape == [64 * wg, 32]


def test_wide_config_persistent_from_its_rows(monkeypatch):
    """``PERSISTENT_MIN_ROWS`` None (the default): no launch is persistent; set, the 256-row
    tile launches from that many rows are (both warpgroup counts), smaller tiles never."""
    assert linear_wide.PERSISTENT_MIN_ROWS is None
    assert not linear_wide.wide_config(4096, 32768)["PERSISTENT"]
    assert not linear_wide.wide_config(4096, 1024)["PERSISTENT"]
    monkeypatch.setattr(linear_wide, "PERSISTENT_MIN_ROWS", 1024)
    big, small = linear_wide.wide_config(4096, 32768), linear_wide.wide_config(4096, 512)
    assert big["PERSISTENT"] and big["WG"] == 2 and small["PERSISTENT"] and small["WG"] == 1
    assert not linear_wide.wide_config(512, 32768)["PERSISTENT"]
    assert "PERSISTENT" not in linear_wide.wide_config(128, 32768)


def _check_ring(events: list[tuple[str, int]], stages: int) -> None:
    """Each issue at position p is its slot's (p // stages + 1)-th (no position skipped, so the
    barrier's phases line up); each wait at p finds exactly p // stages + 1 issues of its slot
    (issued, and not yet re-armed for its next use)."""
    issues = [0] * stages
    for kind, p in events:
        slot, use = p % stages, p // stages
        if kind == "issue":
            assert issues[slot] == use, (kind, p, issues)
            issues[slot] += 1
        else:
            assert issues[slot] == use + 1, (kind, p, issues)


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
def test_persistent_ring_positions(stages):
    """The persistent kernel's ring (``ring_events``, its program order): over tiles of any
    step counts — fewer steps than the ring holds, one step, many — every barrier completes
    once per use in order and every wait finds its own use, across tile boundaries."""
    import random

    rng = random.Random(stages)
    cases = [[16] * 5, [1] * 7, [stages - 1, 1, stages, 2 * stages + 1], [3, 1, 1, 64]]
    cases += [[rng.randint(1, 3 * stages) for _ in range(rng.randint(1, 9))] for _ in range(200)]
    for steps in cases:
        events = linear_wide_persistent.ring_events(steps, stages)
        _check_ring(events, stages)
        assert sum(kind == "issue" for kind, _ in events) == sum(steps)  # every step, once
    # the check fails on a ring whose second tile starts one position late (a skipped one)
    late = [(k, p + 1 if p >= 16 else p)
            for k, p in linear_wide_persistent.ring_events([16, 16], stages)]
    with pytest.raises(AssertionError):
        _check_ring(late, stages)


def test_wide_config_vec_store_from_its_rows(monkeypatch):
    """``VEC_STORE_MIN_ROWS`` None (the default): no launch takes the 16-byte stores; set, every
    launch from that many rows does (any token tile)."""
    assert linear_wide.VEC_STORE_MIN_ROWS is None
    assert not any(linear_wide.wide_config(r, 32768)["VEC_STORE"] for r in (64, 256, 4096))
    monkeypatch.setattr(linear_wide, "VEC_STORE_MIN_ROWS", 128)
    assert [linear_wide.wide_config(r, 32768)["VEC_STORE"] for r in (64, 128, 4096)] == \
        [False, True, True]
