"""``deepinfer-run``: per-line rejections, exit codes, crash + ``--resume``, argument errors."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from deepinfer.artifacts.plan_dir import write_plan
from deepinfer.planner.compile import compile_plan
from deepinfer.planner.report import render_report
from deepinfer.planner.topology_schema import load_topology
from deepinfer.runtime.cli import main as run_main


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "plan"
    p = compile_plan(load_topology("builtin:tiny-cpu"))
    write_plan(out, p, render_report(p), force=False)
    return out


def write_lines(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def read_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_bad_lines_are_rejected_and_the_rest_completes(plan_dir, tmp_path, capsys):
    inp = write_lines(tmp_path / "in.jsonl", [
        {"id": "ok-1", "prompt": "hello there", "max_tokens": 3, "temperature": 0},
        "{not json",
        {"id": "empty", "prompt": ""},
        {"id": "long", "prompt_token_ids": [5] * 5000},
        {"id": "field", "prompt": "hi", "temprature": 0.5},
        {"id": "vocab", "prompt_token_ids": [1, 2, 512]},
        {"id": "ok-2", "prompt_token_ids": [7, 8, 9], "max_tokens": 2},
    ])
    out = tmp_path / "out.jsonl"
    assert run_main([str(plan_dir), "--input", str(inp), "--output", str(out)]) == 3
    rows = {r["id"]: r for r in read_rows(out) if r["id"] is not None}
    errors = {k: v["error"] for k, v in rows.items() if "error" in v}
    assert set(errors) == {"empty", "long", "field", "vocab"}
    assert "empty" in errors["empty"] and "4096" in errors["long"]
    assert "temprature" in errors["field"] and "512" in errors["vocab"]
    assert [len(rows[k]["token_ids"]) for k in ("ok-1", "ok-2")] == [3, 2]
    assert all(rows[k]["finish_reason"] == "length" for k in ("ok-1", "ok-2"))
    err = capsys.readouterr().err
    assert f"{inp}:2:" in err and "malformed JSON" in err and "Traceback" not in err


def run_cli(args, **kw):
    return subprocess.Popen([sys.executable, "-m", "deepinfer.runtime.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_kill_then_resume_gives_every_id_once_as_uninterrupted(plan_dir, tmp_path):
    rows = [{"id": f"r{i}", "prompt_token_ids": [3 + i, 40, 41 + i], "max_tokens": 2 + 3 * i,
             "temperature": 0.8, "seed": i} for i in range(8)]
    inp = write_lines(tmp_path / "in.jsonl", rows)
    full, part = tmp_path / "full.jsonl", tmp_path / "part.jsonl"
    base = [str(plan_dir), "--input", str(inp)]
    assert run_cli([*base, "--output", str(full)]).wait(timeout=300) == 0

    proc = run_cli([*base, "--output", str(part)])
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if part.exists() and part.read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_with = len(read_rows(part))
    assert 2 <= killed_with < len(rows), "the kill must land mid-batch"

    assert run_cli([*base, "--output", str(part), "--resume"]).wait(timeout=300) == 0
    got, want = read_rows(part), read_rows(full)
    assert sorted(r["id"] for r in got) == sorted(r["id"] for r in rows)  # each exactly once
    assert sorted(got, key=lambda r: r["id"]) == sorted(want, key=lambda r: r["id"])


@pytest.mark.parametrize("argv, words", [
    (["topology.yaml"], "deepinfer-compile topology.yaml"),
    (["/no/such/plan"], "/no/such/plan"),
    (["PLAN", "--max-tokens", "0"], "max_tokens"),
    (["PLAN", "--resume"], "--resume needs --output"),
    (["PLAN", "--input", "/no/such/input.jsonl"], "/no/such/input.jsonl"),
])
def test_unusable_arguments_exit_2(plan_dir, argv, words, capsys):
    argv = [str(plan_dir) if a == "PLAN" else a for a in argv]
    assert run_main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
