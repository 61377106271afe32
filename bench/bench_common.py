"""Shared pieces of the issue-7 benchmarks (``bench/decode.py``, ``bench/prefill.py``).

Plan directories derived from a topology (``num_blocks`` capped), the roofline module loaded by
path, the results header (commit, date, GPU, versions), the Triton-cache state, and the pure
helpers over GPU activity intervals from ``torch.profiler``: the idle gaps between steps, the
GPU-busy time (union of intervals) and the per-kernel breakdown. Nothing here times anything
by itself.
"""

from __future__ import annotations

import bisect
import copy
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SLICE_TOPOLOGY = REPO / "artifacts" / "topologies" / "v41-flash-slice-h200.yaml"
CPU_TOPOLOGY = "builtin:tiny-cpu"
MARK_PREFIX = "bench."  # the benchmarks' record_function ranges


def load_by_path(name: str):
    """``bench/<name>.py`` as a module (bench/ is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def roofline():
    """bench/roofline.py: ``measure_ceilings``, ``datasheet_ceilings``, ``rooflines``."""
    return load_by_path("roofline")


def ceilings(plan: dict) -> dict:
    """Measured ceilings on a GPU, else the plan's datasheet numbers (the dict says which)."""
    rl = roofline()
    if torch.cuda.is_available():
        out = rl.measure_ceilings()
        torch.cuda.empty_cache()  # the copy buffers go back before the engine sizes its pool
        return out
    return rl.datasheet_ceilings(rl.topology_of(plan))


def make_plan_dir(root: Path, topology: str | Path, max_blocks: Callable[[dict], int],
                  backend: str | None = None, decode_buckets: list[int] | None = None) -> Path:
    """Compile ``topology`` and write it to ``root / "plan"`` with ``num_blocks`` capped at
    ``max_blocks(compiled plan)`` (the benchmarks need far fewer blocks than the planned pool;
    the rest of the HBM stays free for the profiler and the eager baseline). ``backend``
    forces every op to that backend; ``decode_buckets`` replaces the plan's CUDA-graph decode
    buckets (fewer graphs to capture at start-up)."""
    from deepinfer.artifacts.plan_dir import write_plan
    from deepinfer.planner.compile import compile_plan
    from deepinfer.planner.report import render_report
    from deepinfer.planner.topology_schema import load_topology

    compiled = compile_plan(load_topology(str(topology)))
    plan = copy.deepcopy(compiled)
    cap = max_blocks(compiled)
    for section in ("scheduler", "cache"):
        plan[section]["num_blocks"] = min(plan[section]["num_blocks"], cap)
    if decode_buckets is not None:
        plan["graph_buckets"]["decode"] = sorted(set(decode_buckets))
    if backend is not None:
        plan["kernels"]["backend_by_op"] = dict.fromkeys(plan["kernels"]["backend_by_op"],
                                                         backend)
    return write_plan(root / "plan", plan, render_report(compiled))


def default_topology(topology: str | None) -> str:
    """``topology`` when given; else the slice plan for the GPU at hand (``slice_topology``),
    or the tiny CPU plan without one."""
    if topology:
        return topology
    return slice_topology(torch.cuda.get_device_name()) if torch.cuda.is_available() \
        else CPU_TOPOLOGY


def slice_topology(gpu_name: str, out_dir: Path | None = None) -> str:
    """The slice topology (``SLICE_TOPOLOGY``, written for one H200) for a GPU of this name: on
    an H100 the same file with ``hardware.device: h100`` (the plan loader refuses an H200 plan
    there; the slice's 63.6 GiB of weights leave ~0.8 GiB of cache blocks in its 79 GiB —
    enough for the benchmarks' prompts and decode batches up to 256 x 4K), written to
    ``out_dir`` (default: a temporary directory); on any other GPU the file itself. Figures
    from an H100 are that card's (3.35 TB/s of HBM, not the H200's 4.8): A/B comparisons within
    a run hold, the issue's H200 targets are not measured by them."""
    if not re.search(r"\bh100\b", gpu_name.lower()):
        return str(SLICE_TOPOLOGY)
    text = SLICE_TOPOLOGY.read_text()
    assert text.count("device: h200") == 1, SLICE_TOPOLOGY
    out = Path(out_dir or tempfile.mkdtemp(prefix="slice-h100-")) / "v41-flash-slice-h100.yaml"
    out.write_text(text.replace("device: h200", "device: h100"))
    return str(out)


def git_commit() -> str:
    """HEAD of the checkout, or $DEEPINFER_COMMIT where the copy has no .git."""
    if os.environ.get("DEEPINFER_COMMIT"):
        return os.environ["DEEPINFER_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = "not installed"
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name()
        out["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        out["cuda"] = str(torch.version.cuda)
    else:
        out["gpu"] = "cpu"
    return out


def header(topology: str) -> dict:
    v = versions()
    return {"commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "gpu": v["gpu"], "versions": v, "topology": str(topology)}


def results_path(out_dir: Path, kind: str) -> Path:
    """``<out_dir>/<date>-<gpu or cpu>-<kind>.json``."""
    device = gpu_tag(torch.cuda.get_device_name()) if torch.cuda.is_available() else "cpu"
    return out_dir / f"{time.strftime('%Y-%m-%d')}-{device}-{kind}.json"


def target_card_note(gpu: str | None) -> str:
    """What follows a target's verdict when the run's GPU is not the H200 the issue's targets
    are set on ("" on an H200; CPU runs measure no target)."""
    if not gpu or "h200" in gpu.lower():
        return ""
    return f" (on {gpu}: the issue's targets are the H200's)"


def gpu_tag(name: str) -> str:
    """A GPU's model in a file name: "NVIDIA H200" -> h200, "NVIDIA H100 80GB HBM3" -> h100
    (the first word of letters then digits, else the last word)."""
    words = name.lower().split()
    return next((w for w in words if re.fullmatch(r"[a-z]+\d+[a-z]*", w)), words[-1])


def write_json(res: dict, paths: list[Path]) -> None:
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(res, indent=1, sort_keys=True, default=str))


def run_with_partials(kind: str, out_dirs: list[Path] | None, run) -> dict:
    """``run(root, progress)`` in a temporary directory; ``progress(res)`` writes
    ``<date>-<gpu>-<kind>.partial.json`` (what a timeout leaves), the end the final JSON."""
    outs = [results_path(d, kind) for d in (out_dirs or [REPO / "bench" / "results"])]

    def progress(res: dict) -> None:
        write_json(res, [p.with_suffix(".partial.json") for p in outs])

    with tempfile.TemporaryDirectory() as tmp:
        res = run(Path(tmp), progress)
    write_json(res, outs)
    for p in outs:
        p.with_suffix(".partial.json").unlink(missing_ok=True)
    return res


def triton_cache_state() -> dict:
    """Where Triton caches compiled kernels and whether it was empty (a cold start)."""
    path = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    num_entries = sum(1 for _ in path.iterdir()) if path.is_dir() else 0
    return {"dir": str(path), "entries": num_entries, "cold": num_entries == 0}


def smoke_or_gpu(smoke_mode: bool, smoke: Callable[[], None], bench: Callable[[], None]) -> int:
    """A kernel bench's two modes: ``smoke()`` under the Triton interpreter (TRITON_INTERPRET=1
    set before any kernel module imports triton; correctness only, CI), else ``bench()`` on a
    CUDA GPU with compiled kernels. Returns the exit status (0)."""
    if smoke_mode:
        os.environ["TRITON_INTERPRET"] = "1"
        smoke()
        return 0
    from deepinfer.kernels.triton.gemm_fp8 import is_interpreting

    assert torch.cuda.is_available() and not is_interpreting(), \
        "needs a CUDA GPU and TRITON_INTERPRET=0 (or --smoke)"
    bench()
    return 0


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn):
    """(fn(), wall seconds), the GPU drained before and after."""
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t0


def host_us_per_call(fn, calls: int) -> float:
    """Host µs per call of ``fn()``: the best of 3 loops of ``calls`` calls, the GPU drained
    before each loop and after it (outside the timing): what enqueuing costs the host."""
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        best = min(best, (t1 - t0) / calls * 1e6)
    return best


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


# ---- GPU activity intervals (µs on the profiler's clock) -------------------------------------
def gpu_intervals(prof) -> list[tuple[float, float, str]]:
    """(start_us, end_us, name) of every GPU activity (kernels, memcpy, memset) a finished
    ``torch.profiler.profile`` recorded, sorted by start; user annotations (the GPU-side
    spans of ``record_function`` ranges, which would cover the idle gaps) are left out."""
    out = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA or \
                getattr(e, "is_user_annotation", False) or e.name.startswith(MARK_PREFIX):
            continue
        out.append((float(e.time_range.start), float(e.time_range.end), e.name))
    return sorted(out)


def cpu_ranges(prof, name: str) -> list[tuple[float, float]]:
    """(start_us, end_us) of the host ranges ``record_function(name)`` opened, sorted."""
    return sorted((float(e.time_range.start), float(e.time_range.end)) for e in prof.events()
                  if e.name == name and e.device_type == torch.autograd.DeviceType.CPU)


def runtime_calls(prof, within: list[tuple[float, float]] | None = None,
                  top: int = 8) -> list[dict]:
    """The CUDA runtime/driver API calls the host made (``cuda*``/``cu*`` events), by total host
    time, largest first: name, calls, total_us, max_us. ``within``: only calls starting inside
    these host ranges. A synchronizing call (``cudaStreamSynchronize``, a pageable
    ``cudaMemcpy``, ``cudaHostAlloc``) where none is expected shows why the GPU idles."""
    per: dict[str, list[float]] = {}
    starts = [r[0] for r in within or []]
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CPU or not e.name.startswith("cu"):
            continue
        start = float(e.time_range.start)
        if within is not None:
            i = bisect.bisect_right(starts, start) - 1
            if i < 0 or start > within[i][1]:
                continue
        per.setdefault(e.name, []).append(float(e.time_range.end) - start)
    rows = [{"name": n, "calls": len(v), "total_us": round(sum(v), 1), "max_us": round(max(v), 1)}
            for n, v in per.items()]
    return sorted(rows, key=lambda r: -r["total_us"])[:top]


def print_kernel_profile(title: str, k: dict) -> None:
    """A profile dict (mode, replays, wall/GPU-busy ms per replay, kernels of
    :func:`kernel_table` with us_per_replay) as a markdown table."""
    print(f"\n{title} ({k['mode']}): GPU busy {k['gpu_busy_ms_per_replay']:.3f} ms of "
          f"{k['wall_ms_per_replay']:.3f} ms wall per replay")
    print("| kernel | calls/replay | µs/replay | share |")
    print("|---|---:|---:|---:|")
    for r in k["kernels"]:
        name = r["name"][:70].replace("|", "\\|")
        print(f"| `{name}` | {r['calls'] / k['replays']:.0f} | {r['us_per_replay']:.1f} | "
              f"{r['share']:.1%} |")
    if k.get("idle_before"):
        print("GPU idle (waiting for the host) before, by the activity that ended it:")
        print("| activity | gaps | idle µs | largest µs | largest at ms | after |")
        print("|---|---:|---:|---:|---:|---|")
        for r in k["idle_before"]:
            name = r["name"][:70].replace("|", "\\|")
            after = r.get("max_after", "")[:40].replace("|", "\\|")
            print(f"| `{name}` | {r['gaps']} | {r['total_us']:.1f} | {r['max_us']:.1f} | "
                  f"{r.get('max_at_ms', float('nan')):.2f} | `{after}` |")
    if k.get("idle_windows"):
        print("GPU idle gaps by when they ended (ms after the first activity):")
        print("| window ms | gaps | idle µs | median µs | p90 µs | over 20 µs |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in k["idle_windows"]:
            print(f"| {r['from_ms']:g}–{r['to_ms']:g} | {r['gaps']} | {r['total_us']:.1f} | "
                  f"{r['median_us']:.2f} | {r['p90_us']:.2f} | {r['over_20us']} |")


def busy_us(intervals: list[tuple[float, float, str]]) -> float:
    """Length of the union of the intervals (time the GPU ran anything)."""
    total, end = 0.0, float("-inf")
    for s, e, _ in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def idle_before_us(intervals: list[tuple[float, float, str]],
                   marks_us: list[float]) -> list[float]:
    """For each host mark (a step's launch), the GPU idle time right before the first GPU
    activity starting at or after it: that activity's start minus the latest end of every
    activity that started before it (0 when it was queued behind running work).

    Args: intervals (start_us, end_us, name) of GPU activities; marks_us on the same clock.
    Marks with no activity before and after them are skipped.
    """
    ivs = sorted(intervals)
    starts = [s for s, _, _ in ivs]
    prefix_end, end = [], float("-inf")
    for _, e, _ in ivs:
        end = max(end, e)
        prefix_end.append(end)
    gaps = []
    for mark in marks_us:
        first = bisect.bisect_left(starts, mark)
        if first == 0 or first >= len(ivs):
            continue
        gaps.append(max(0.0, ivs[first][0] - prefix_end[first - 1]))
    return gaps


def idle_by_next(intervals: list[tuple[float, float, str]], top: int = 10) -> list[dict]:
    """The GPU's idle time between activities, charged to the activity that ended each idle
    stretch (the GPU waited for the host to enqueue it): name, gaps, total_us, max_us, and
    where the largest gap ended (``max_at_ms`` after the first activity began) and what ran
    before it (``max_after``); largest total first. Idle before the first activity is not
    counted (no previous work)."""
    per: dict[str, list[tuple[float, float, str]]] = {}
    end, prev, t0 = float("-inf"), "", None
    for s, e, name in sorted(intervals):
        t0 = s if t0 is None else t0
        if end > float("-inf") and s > end:
            per.setdefault(name, []).append((s - end, s - t0, prev))
        if e >= end:
            end, prev = e, name
    rows = []
    for n, v in per.items():
        gap, at, after = max(v)
        rows.append({"name": n, "gaps": len(v), "total_us": round(sum(g for g, _, _ in v), 1),
                     "max_us": round(gap, 1), "max_at_ms": round(at / 1e3, 2),
                     "max_after": after})
    return sorted(rows, key=lambda r: -r["total_us"])[:top]


def idle_windows(intervals: list[tuple[float, float, str]],
                 edges_ms: tuple[float, ...] = (10.0, 20.0)) -> list[dict]:
    """The GPU's idle gaps between activities by when they ended (ms after the first activity
    began; windows split at ``edges_ms``): gaps, total_us, median_us, p90_us, and how many
    were over 20 µs. The first window holds the host-paced start (layer 0's host work); in
    the later ones the host is ahead, so their gaps are what a kernel boundary costs."""
    bounds = [0.0, *edges_ms, float("inf")]
    per: list[list[float]] = [[] for _ in bounds[1:]]
    end, t0 = float("-inf"), None
    for s, e, _ in sorted(intervals):
        t0 = s if t0 is None else t0
        if end > float("-inf") and s > end:
            at_ms = (s - t0) / 1e3
            per[bisect.bisect_right(bounds, at_ms) - 1].append(s - end)
        end = max(end, e)
    rows = []
    for lo, hi, gaps in zip(bounds[:-1], bounds[1:], per, strict=True):
        rows.append({"from_ms": lo, "to_ms": hi, "gaps": len(gaps),
                     "total_us": round(sum(gaps), 1),
                     "median_us": round(percentile(gaps, 50), 2) if gaps else 0.0,
                     "p90_us": round(percentile(gaps, 90), 2) if gaps else 0.0,
                     "over_20us": sum(g > 20 for g in gaps)})
    return rows


def op_table(prof, roots: list[str], top: int = 12, frames: int = 4) -> list[dict]:
    """The torch ops (``aten::*``) of a finished ``torch.profiler.profile(record_shapes=True,
    with_stack=True)`` grouped by op, input shapes and the Python frames that issued them,
    largest own device time first (own CPU time where the profile has no device time): op,
    calls, self_device_us, self_cpu_us, shapes, stack — the innermost ``frames`` Python frames
    among the op's enclosing events whose name holds one of ``roots`` (our code: torch names a
    frame "FILE(LINE): FUNCTION", FILE relative to a sys.path entry or absolute), else among
    the op's own ``stack`` (where a torch build attaches the frames to the op instead). Names
    the source of a torch kernel the kernel table shows without one (e.g. a ``direct_copy`` of
    150 MB a layer)."""
    groups: dict[tuple, dict] = {}
    for ev in prof.events():
        if not ev.name.startswith("aten::"):
            continue
        ours, parent = [], ev.cpu_parent
        while parent is not None and len(ours) < frames:
            if not parent.name.startswith("aten::") and _frame_is_ours(parent.name, roots):
                ours.append(parent.name)
            parent = parent.cpu_parent
        if not ours:  # torch builds that attach the frames to the op (``stack``), innermost first
            ours = [f for f in (getattr(ev, "stack", None) or []) if _frame_is_ours(f, roots)]
            ours = ours[:frames]
        shapes = str(ev.input_shapes)
        row = groups.setdefault((ev.name, shapes, tuple(ours)), {
            "op": ev.name, "calls": 0, "self_device_us": 0.0, "self_cpu_us": 0.0,
            "shapes": shapes, "stack": ours})
        row["calls"] += 1
        row["self_device_us"] += float(getattr(ev, "self_device_time_total", 0.0))
        row["self_cpu_us"] += float(ev.self_cpu_time_total)
    rows = list(groups.values())
    key = "self_device_us" if any(r["self_device_us"] > 0 for r in rows) else "self_cpu_us"
    return sorted(rows, key=lambda r: -r[key])[:top]


_FRAME = re.compile(r".+\.py\(\d+\): ")  # a profiler frame's name: "FILE(LINE): FUNCTION"


def frame_census(prof, samples: int = 5) -> dict:
    """What a profile holds in Python frames where :func:`op_table` matched none (round 170 on
    the device: every row "?", the first op with no enclosing event): the number of events
    named like a frame ("FILE(LINE): FUNCTION"), a few of their names, how many ``aten::``
    events have any enclosing event or a ``stack`` of their own, and the enclosing names of
    the first with an enclosing event."""
    frames, aten, parented, first, stacked = [], 0, 0, [], 0
    for ev in prof.events():
        if _FRAME.match(ev.name):
            frames.append(ev.name)
        elif ev.name.startswith("aten::"):
            aten += 1
            stacked += bool(getattr(ev, "stack", None))
            if ev.cpu_parent is not None:
                parented += 1
                if not first:
                    parent = ev.cpu_parent
                    while parent is not None and len(first) < 8:
                        first.append(parent.name)
                        parent = parent.cpu_parent
    return {"frame_events": len(frames), "frame_samples": sorted(set(frames))[:samples],
            "aten_events": aten, "aten_with_parent": parented, "aten_with_stack": stacked,
            "first_parented": first}


def package_files(package_dir: Path) -> list[str]:
    """Every ``.py`` file under ``package_dir`` as a path relative to it ("runtime/engine.py"):
    :func:`op_table` roots that match a frame whatever prefix names its file (absolute,
    relative to a sys.path entry, through a symlink or an editable install's mapping)."""
    rel = (p.relative_to(package_dir).as_posix() for p in package_dir.rglob("*.py"))
    return sorted(r for r in rel if not r.startswith(".") and "/." not in r)


def _frame_is_ours(name: str, roots: list[str]) -> bool:
    """Whether a profiler frame "FILE(LINE): FUNCTION" is one of ``roots``: a root ending in
    ".py" names a file, matched at the end of FILE on a directory boundary; any other root is
    a substring of the name (a directory, a package prefix)."""
    file = name.split("(", 1)[0].replace("\\", "/")
    for r in roots:
        if r.endswith(".py"):
            if file == r or file.endswith("/" + r):
                return True
        elif r in name:
            return True
    return False


def print_op_table(title: str, rows: list[dict]) -> None:
    """:func:`op_table`'s rows as a markdown table."""
    print(f"\n{title}")
    print("| op | calls | own device µs | own CPU µs | shapes | issued at |")
    print("|---|---:|---:|---:|---|---|")
    for r in rows:
        where = " < ".join(f.rsplit("/", 1)[-1] for f in r["stack"]) or "?"
        print(f"| `{r['op']}` | {r['calls']} | {r['self_device_us']:.1f} | "
              f"{r['self_cpu_us']:.1f} | {r['shapes'][:60]} | {where.replace('|', '/')} |")


def kernel_table(intervals: list[tuple[float, float, str]], top: int = 15) -> list[dict]:
    """GPU time per activity name, largest first: name, calls, total_us, share of GPU time;
    the top ``top`` rows, then (when more remain) one row summing the rest, named
    "(N more activities)"."""
    per: dict[str, list[float]] = {}
    for s, e, name in intervals:
        per.setdefault(name, []).append(e - s)
    total = sum(sum(v) for v in per.values()) or 1.0
    rows = sorted(({"name": n, "calls": len(v), "total_us": sum(v), "share": sum(v) / total}
                   for n, v in per.items()), key=lambda r: -r["total_us"])
    rest = rows[top:]
    if rest:
        rest_us = sum(r["total_us"] for r in rest)
        rows = rows[:top] + [{"name": f"({len(rest)} more activities)",
                              "calls": sum(r["calls"] for r in rest), "total_us": rest_us,
                              "share": rest_us / total}]
    return rows


def gap_summary(gaps_us: list[float]) -> dict:
    if not gaps_us:
        return {"count": 0}
    return {"count": len(gaps_us), "median_us": statistics.median(gaps_us),
            "p90_us": percentile(gaps_us, 90), "max_us": max(gaps_us)}
