"""The pure helpers of bench/bench_common.py over GPU activity intervals (no GPU needed)."""

import importlib.util
from pathlib import Path

import pytest
import torch

_PATH = Path(__file__).resolve().parents[2] / "bench" / "bench_common.py"
_spec = importlib.util.spec_from_file_location("bench_common", _PATH)
bc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bc)


def test_busy_is_the_union_of_overlapping_intervals():
    assert bc.busy_us([(0, 10, "a"), (5, 12, "b"), (20, 25, "c"), (21, 22, "d")]) == 17


def test_idle_before_a_launch_is_the_gpu_idle_time_before_its_first_activity():
    # step 0 runs 0..20; step 1 launched at host 30, its input copy runs 40..42 (idle 20..40);
    # step 2 launched at host 45 while step 1 still runs (50..70): queued behind it, no idle
    ivs = [(0, 10, "k"), (12, 20, "k"), (40, 42, "copy"), (50, 60, "k"), (61, 70, "k"),
           (70, 72, "copy"), (72, 90, "k")]
    assert bc.idle_before_us(ivs, [30]) == [20]
    assert bc.idle_before_us(ivs, [65]) == [0.0]  # first activity after it: the queued copy
    assert bc.idle_before_us(ivs, [-5, 200]) == []  # nothing before / after: skipped


def test_kernel_table_groups_by_name_largest_first():
    rows = bc.kernel_table([(0, 4, "a"), (4, 5, "b"), (5, 9, "a")], top=5)
    assert [(r["name"], r["calls"], r["total_us"]) for r in rows] == [("a", 2, 8), ("b", 1, 1)]
    assert rows[0]["share"] == pytest.approx(8 / 9)
    # beyond top: one row sums the rest
    rows = bc.kernel_table([(0, 4, "a"), (4, 5, "b"), (5, 7, "c"), (7, 8, "d")], top=1)
    assert [(r["name"], r["calls"], r["total_us"]) for r in rows] == [
        ("a", 1, 4), ("(3 more activities)", 3, 4)]
    assert rows[1]["share"] == pytest.approx(0.5)


def test_gap_summary_median_and_p90():
    s = bc.gap_summary([float(x) for x in range(1, 11)])
    assert s["count"] == 10 and s["median_us"] == 5.5 and s["p90_us"] == 9.0


def _casts(x):
    """A dtype-casting copy (the kind of op op_table is for) and a matmul."""
    return x.to(torch.float64).sum() + (x @ x).sum()


def test_op_table_names_the_ops_their_shapes_and_our_issuing_frames():
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        for _ in range(3):
            _casts(x)
    # frame names: the file as torch shortens it (relative to a sys.path entry, or absolute)
    rows = bc.op_table(prof, [Path(__file__).name], top=50)
    copies = [r for r in rows if r["op"] == "aten::copy_" and "[64, 64]" in r["shapes"]]
    assert len(copies) == 1 and copies[0]["calls"] == 3, copies
    assert copies[0]["stack"] and "_casts" in copies[0]["stack"][0], copies[0]["stack"]
    mm = [r for r in rows if r["op"] == "aten::mm"]
    assert len(mm) == 1 and mm[0]["calls"] == 3 and mm[0]["self_cpu_us"] > 0
    assert rows == sorted(rows, key=lambda r: -r["self_cpu_us"])  # no device time here
    assert len(bc.op_table(prof, [], top=2)) == 2


def test_op_table_frames_match_our_files_under_any_prefix(tmp_path):
    (tmp_path / "runtime" / "model").mkdir(parents=True)
    (tmp_path / "runtime" / "model" / "attention.py").write_text("")
    (tmp_path / "engine.py").write_text("")
    roots = bc.package_files(tmp_path)
    assert roots == ["engine.py", "runtime/model/attention.py"]
    for name in ("/opt/x/main/runtime/model/attention.py(88): forward",
                 "deepinfer/runtime/model/attention.py(88): forward",
                 "main/engine.py(3): step", "engine.py(3): step"):
        assert bc._frame_is_ours(name, roots), name
    for name in ("/opt/x/torch/nn/modules/module.py(1775): _wrapped_call_impl",
                 "/opt/x/myengine.py(3): step", "runtime/model/attention.pyc(1): f"):
        assert not bc._frame_is_ours(name, roots), name
    assert bc._frame_is_ours("/a/b/bench_x(3): f", ["bench_x"])  # a substring root


def test_op_table_takes_the_ops_own_stack_without_enclosing_frames():
    """A torch build that attaches the Python frames to the op (``stack``) instead of
    enclosing events: op_table matches ours among them."""
    from types import SimpleNamespace

    ev = SimpleNamespace(name="aten::mm", cpu_parent=None, input_shapes=[[2, 2], [2, 2]],
                         self_device_time_total=5.0, self_cpu_time_total=1.0,
                         stack=["/x/torch/nn/functional.py(9): linear",
                                "/opt/x/runtime/model/attention.py(88): forward"])
    prof = SimpleNamespace(events=lambda: [ev])
    rows = bc.op_table(prof, ["runtime/model/attention.py"])
    assert rows[0]["stack"] == ["/opt/x/runtime/model/attention.py(88): forward"], rows
    assert bc.frame_census(prof)["aten_with_stack"] == 1


def test_frame_census_counts_the_frames_and_the_ops_under_them():
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(8, 8)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        _casts(x)
    census = bc.frame_census(prof)
    assert census["frame_events"] > 0 and census["aten_events"] >= 3
    assert 0 < census["aten_with_parent"] <= census["aten_events"]
    assert any("_casts" in n for n in census["first_parented"]), census
    with profile(activities=[ProfilerActivity.CPU]) as bare:  # no stacks: no frames
        _casts(x)
    assert bc.frame_census(bare)["frame_events"] == 0


def test_slice_topology_follows_the_gpu(tmp_path):
    """The slice plan for the GPU at hand: the H200 file itself on an H200 (or any other GPU),
    on an H100 the same topology with ``hardware.device: h100``, which compiles there (the
    plan loader refuses an H200 plan on an H100) with the same model and a smaller cache."""
    from deepinfer.planner.compile import compile_plan
    from deepinfer.planner.topology_schema import load_topology

    assert bc.slice_topology("NVIDIA H200") == str(bc.SLICE_TOPOLOGY)
    path = bc.slice_topology("NVIDIA H100 80GB HBM3", tmp_path)
    assert path.startswith(str(tmp_path))
    text, base = Path(path).read_text(), bc.SLICE_TOPOLOGY.read_text()
    assert text == base.replace("device: h200", "device: h100") and text != base
    h100, h200 = (compile_plan(load_topology(p)) for p in (path, str(bc.SLICE_TOPOLOGY)))
    assert h100["topology"]["hardware"]["device"] == "h100"
    assert h100["model"] == h200["model"]
    assert 0 < h100["cache"]["num_blocks"] < h200["cache"]["num_blocks"]


def test_gpu_tag_names_the_model():
    """Results files carry the GPU's model, not its memory type."""
    assert bc.gpu_tag("NVIDIA H200") == "h200"
    assert bc.gpu_tag("NVIDIA H100 80GB HBM3") == "h100"
    assert bc.gpu_tag("NVIDIA H100 PCIe") == "h100"


def test_target_verdicts_name_another_card():
    """A target's verdict from a GPU other than the H200 says so; on the H200 (and on the CPU,
    which measures none) it adds nothing."""
    assert bc.target_card_note("NVIDIA H200") == ""
    assert bc.target_card_note(None) == ""
    assert "H200's" in bc.target_card_note("NVIDIA H100 80GB HBM3")
    assert "NVIDIA H100 80GB HBM3" in bc.target_card_note("NVIDIA H100 80GB HBM3")
