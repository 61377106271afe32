"""bench/prefill_families.py: a prefill's kernel table by family against each family's compute
floor (hand-checked arithmetic), the floors summing to the prefill's compute roofline on a
compiled plan, and its command line on a results JSON (good and bad input)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import prefill_families as pf  # noqa: E402

CEILINGS = {"fp8_flops_per_s": 2e15, "bf16_flops_per_s": 1e15, "hbm_bytes_per_s": 4e12}
FLOPS = {"expert_flops": 4e13, "dense_flops": 2e13, "attention_flops": 5e12,
         "indexer_flops": 1e12}
BYTES = {"expert_bytes": 2e11, "dense_weight_bytes": 4e9, "kv_bytes": 8e9,
         "engram_bytes": 1e6, "activation_bytes": 1e9}


def _kernels():
    return [{"name": "_w4a16_prefill_ws_kernel", "calls": 24, "us_per_replay": 40_000.0},
            {"name": "_linear_wide_kernel", "calls": 68, "us_per_replay": 20_000.0},
            {"name": "_hc_coeffs_kernel", "calls": 16, "us_per_replay": 1_000.0},
            {"name": "_attn_prefill_ws_kernel", "calls": 8, "us_per_replay": 10_000.0},
            {"name": "_index_scores_kernel", "calls": 3, "us_per_replay": 2_000.0},
            {"name": "_rms_norm_kernel", "calls": 35, "us_per_replay": 500.0},
            {"name": "(46 more activities)", "calls": 305, "us_per_replay": 700.0}]


def test_family_of_names_each_kernel_class():
    assert pf.family_of("_w4a16_prefill_kernel") == "routed experts"
    assert pf.family_of("_w4a16_prefill_ws_kernel") == "routed experts"
    assert pf.family_of("_linear_wide_kernel") == "dense GEMMs"
    assert pf.family_of("_linear_ss_kernel") == "dense GEMMs"
    assert pf.family_of("_hc_coeffs_kernel") == "dense GEMMs"
    assert pf.family_of("_attn_prefill_ws_kernel") == "attention"
    assert pf.family_of("_index_scores_kernel") == "indexer scores"
    assert pf.family_of("_scores_keys_m_kernel") == "indexer scores"
    assert pf.family_of("_rms_norm_kernel") == pf.REST
    assert pf.family_of("Memcpy HtoD (Pinned -> Device)") == pf.REST


def test_family_rows_floors_and_eta_by_hand():
    rows = {r["family"]: r for r in pf.family_rows(_kernels(), FLOPS, 2, CEILINGS)}
    ex = rows["routed experts"]  # 2 steps x 4e13 at 2e15 FLOP/s: 40 ms; bf16: 80 ms
    assert ex["us"] == 40_000 and ex["calls"] == 24
    assert ex["floor_us"] == pytest.approx(40_000) and ex["eta"] == pytest.approx(1.0)
    assert ex["bf16_floor_us"] == pytest.approx(80_000) and ex["bf16_eta"] == pytest.approx(2.0)
    dense = rows["dense GEMMs"]  # linear_wide + hc_coeffs: 21 ms against 20 ms
    assert dense["us"] == 21_000 and dense["floor_us"] == pytest.approx(20_000)
    assert dense["eta"] == pytest.approx(20 / 21)
    att = rows["attention"]  # bf16 rate for both columns: 10 ms
    assert att["floor_us"] == pytest.approx(10_000) == att["bf16_floor_us"]
    assert rows["indexer scores"]["eta"] == pytest.approx(1.0)
    rest = rows[pf.REST]
    assert rest["us"] == 1_200 and rest["calls"] == 340 and rest["floor_us"] is None
    assert ex["mem_floor_us"] is None and ex["bound_eta"] is None  # no bytes given
    text = pf.table(list(rows.values()))
    assert "| routed experts | 24 | 40.00 | 40.00 | 1.00 | 80.00 | 2.00 |  |  |  |" in text
    assert f"| {pf.REST} | 340 | 1.20 |  |  |  |  |  |  |  |" in text
    assert "own floors summed" not in text


def test_family_hbm_floors_and_own_floor_by_hand():
    rows = {r["family"]: r for r in pf.family_rows(_kernels(), FLOPS, 2, CEILINGS, BYTES)}
    ex = rows["routed experts"]  # 2 steps x 2e11 B at 4e12 B/s: 100 ms > 40 ms of FLOPs
    assert ex["mem_floor_us"] == pytest.approx(100_000)
    assert ex["bound_floor_us"] == pytest.approx(100_000) and ex["bound_eta"] == pytest.approx(2.5)
    dense = rows["dense GEMMs"]  # 2 ms of weights < 20 ms of FLOPs
    assert dense["mem_floor_us"] == pytest.approx(2_000)
    assert dense["bound_floor_us"] == pytest.approx(20_000)
    att = rows["attention"]  # 4 ms of KV < 10 ms
    assert att["mem_floor_us"] == pytest.approx(4_000) and att["bound_floor_us"] == 10_000
    idx = rows["indexer scores"]  # no bytes of its own counted
    assert idx["mem_floor_us"] is None and idx["bound_floor_us"] is None
    text = pf.table(list(rows.values()))
    assert "| routed experts | 24 | 40.00 | 40.00 | 1.00 | 80.00 | 2.00 | 100.00 | 100.00 | " \
           "2.50 |" in text
    # 100 + 20 + 10 + the indexer's compute floor 2 ms
    assert "own floors summed (each at its own bound, in turn): 132.00 ms; their compute " \
           "floors: 72.00 ms" in text


def test_family_without_kernels_has_no_eta():
    rows = pf.family_rows([], FLOPS, 1, CEILINGS)
    assert all(r["us"] == 0 and r["eta"] is None for r in rows)


def _cpu_results(tmp_path: Path) -> tuple[Path, dict]:
    """A results JSON as prefill.py writes it, for the CPU tiny plan's topology."""
    import bench_common as bc

    res = {"topology": bc.CPU_TOPOLOGY, "commit": "abc", "gpu": "test",
           "ceilings": CEILINGS, "kernels": {"prompt_len": 64, "kernels": _kernels()},
           "prefill_batch": [{"prompts": 2, "prompt_len": 64,
                              "kernels": {"prompt_len": 64, "prompts": 2,
                                          "kernels": _kernels()}}]}
    path = tmp_path / "r-prefill.json"
    path.write_text(json.dumps(res))
    return path, res


def test_floors_sum_to_the_prefill_compute_roofline(tmp_path):
    """The four floors of one prompt are the roofline's compute time (the same cost model and
    rates): nothing counted twice or left out."""
    import bench_common as bc
    import roofline

    from deepinfer.artifacts.plan_dir import read_plan

    plan = read_plan(bc.make_plan_dir(tmp_path, bc.CPU_TOPOLOGY, lambda compiled: 64))
    _, res = _cpu_results(tmp_path)
    rows = pf.from_results(res, plan)
    (roof,) = roofline.rooflines(plan, [], [64], CEILINGS)["prefill"]
    floors = sum(r["floor_us"] for r in rows if r["floor_us"] is not None)
    assert floors / 1e3 == pytest.approx(roof["compute_ms"] * roof["steps"])
    assert floors > 0
    # a batch's table: each prompt's floors, times the prompts
    batch = pf.from_profile(res["prefill_batch"][0]["kernels"], plan, CEILINGS)
    for one, two in zip(rows, batch, strict=True):
        if one["floor_us"] is not None:
            assert two["floor_us"] == pytest.approx(2 * one["floor_us"])


def test_command_line_on_a_results_json_and_bad_input(tmp_path):
    path, _ = _cpu_results(tmp_path)
    ok = subprocess.run([sys.executable, str(BENCH / "prefill_families.py"), str(path)],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "| routed experts | 24 | 40.00 |" in ok.stdout and "64-token prefill" in ok.stdout
    assert "2 x 64-token prompts in one generate:" in ok.stdout
    missing = subprocess.run([sys.executable, str(BENCH / "prefill_families.py"),
                              str(tmp_path / "nope.json")], capture_output=True, text=True)
    assert missing.returncode == 2 and "nope.json" in missing.stderr
    assert "Traceback" not in missing.stderr
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"topology": "x"}))
    no_profile = subprocess.run([sys.executable, str(BENCH / "prefill_families.py"), str(bare)],
                                capture_output=True, text=True)
    assert no_profile.returncode == 2 and "'kernels'" in no_profile.stderr
