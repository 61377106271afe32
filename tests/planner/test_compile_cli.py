"""deepinfer-compile end to end: malformed inputs exit 2 naming the field (no traceback, no plan
directory left), internal errors exit 1, plans are byte-identical on recompilation, the
overwrite rules, the full-size plan's speed and report."""

import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from deepinfer.artifacts.model_spec import builtin_config_path
from deepinfer.artifacts.plan_dir import plan_json_bytes, read_plan
from deepinfer.artifacts.plan_schema import REQUIRED_KEYS
from deepinfer.planner import cli
from deepinfer.planner.compile import compile_plan
from deepinfer.planner.report import render_report
from deepinfer.planner.topology_schema import load_topology

TINY = {
    "model": {"path": "builtin:tiny", "weights": "synthetic"},
    "hardware": {"device": "cpu", "memory_gib": 0.25},
    "cache": {"block_size": 16, "memory_fraction": 0.5, "max_model_len": 4096},
    "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 256, "prefill_chunk_size": 128},
    "workload": {"prompt_len": 32, "output_len": 16, "num_requests": 4},
}


def with_(**sections) -> dict:
    """TINY with the given sections' keys replaced (a section set to None is removed)."""
    doc = copy.deepcopy(TINY)
    for name, keys in sections.items():
        if keys is None:
            doc.pop(name)
        else:
            doc.setdefault(name, {}).update(keys)
    return doc


def tiny_config() -> dict:
    return json.loads(builtin_config_path("tiny").read_text())


def setup_files(tmp_path: Path, files: dict) -> None:
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content))


V4_CONFIG = {"model_type": "deepseek_v4", "text_config": {"hidden_size": 4096}}
LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                "vocab_size": 32000}
BAD_LOAD = {"load": [[1.0] * 8] * 3}  # tiny has 8 MoE layers of 8 experts

# (case id, topology document or raw YAML text, extra files, expected text in the message)
MALFORMED = [
    ("unknown-key", with_(cache={"blocksize": 16}), {}, "cache.blocksize: unknown key"),
    ("unknown-section", {**TINY, "paralel": {}}, {}, "did you mean 'parallel'"),
    ("wrong-type", with_(scheduler={"max_num_seqs": "many"}), {},
     "scheduler.max_num_seqs: expected an integer"),
    ("zero-size", with_(cache={"block_size": 0}), {}, "cache.block_size: expected an integer >= 1"),
    ("negative-size", with_(workload={"prompt_len": -5}), {}, "workload.prompt_len"),
    ("bad-enum", with_(hardware={"device": "tpu"}), {},
     "hardware.device: expected one of cpu, h100, h200, h20, b200, custom"),
    ("bad-mode", with_(scheduler={"mode": "batch"}), {}, "normal, prompt, completion"),
    ("fraction", with_(cache={"memory_fraction": 0}), {}, "cache.memory_fraction"),
    ("ep-not-dividing", with_(parallel={"dp": 2, "ep": 3}), {}, "parallel.ep: ep = 3 must divide"),
    ("ep-over-experts", with_(parallel={"dp": 16, "ep": 16}), {},
     "parallel.ep: EP size 16 exceeds the model's 8 routed experts"),
    ("memory-too-small", with_(hardware={"memory_gib": 0.005}), {},
     "hardware.memory_gib: rank 0 needs"),
    ("block-not-multiple", with_(cache={"block_size": 6}), {}, "cache.block_size: block size 6"),
    ("devices-mismatch", with_(parallel={"dp": 2}, hardware={"gpus_per_node": 4}), {},
     "parallel.dp"),
    ("draft-without-method", {**TINY, "speculative": {"num_draft_tokens": 3}}, {},
     "speculative.num_draft_tokens"),
    ("missing-checkpoint", with_(model={"path": "checkpoints/none"}), {}, "model.path"),
    ("dir-without-config", with_(model={"path": "ckpt"}), {"ckpt/weights.bin": "x"},
     "no config.json"),
    ("config-not-json", with_(model={"path": "ckpt"}), {"ckpt/config.json": "{oops"},
     "model.path: "),
    ("config-v4", with_(model={"path": "ckpt"}), {"ckpt/config.json": V4_CONFIG},
     "field 'model_type': expected one of deepseek_v41"),
    ("config-llama", with_(model={"path": "ckpt"}), {"ckpt/config.json": LLAMA_CONFIG},
     "not a DeepSeek-V4.1 config"),
    ("config-bad-field", with_(model={"path": "ckpt"}),
     {"ckpt/config.json": {**tiny_config(), "text_config": {
         **tiny_config()["text_config"], "head_dim": 65}}}, "field 'text_config.head_dim'"),
    ("load-stats-missing", with_(eplb={"load_stats": "stats.json"}), {}, "eplb.load_stats"),
    ("load-stats-unreadable", with_(eplb={"load_stats": "stats.json"}),
     {"stats.json": "not json"}, "stats.json: load: not valid JSON"),
    ("load-stats-shape", with_(eplb={"load_stats": "stats.json"}), {"stats.json": BAD_LOAD},
     "load: expected 8 rows"),
    ("decode-stats-shape", with_(eplb={"decode_load_stats": "d.json"}),
     {"d.json": {"load": [[1] * 7] * 8}}, "row 0: expected 8 entries"),
    ("yaml-syntax", "model: {path: builtin:tiny\n", {}, "not valid YAML"),
    ("duplicate-key", "model: {path: builtin:tiny}\nmodel: {path: builtin:tiny}\n", {},
     "duplicate key 'model'"),
    ("no-model", with_(model=None), {}, "model: missing"),
]


def run_main(capsys, argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("doc, files, expect", [c[1:] for c in MALFORMED],
                         ids=[c[0] for c in MALFORMED])
def test_malformed_topology_exits_2(tmp_path, capsys, doc, files, expect):
    setup_files(tmp_path, files)
    topo = tmp_path / "topology.yaml"
    topo.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    out = tmp_path / "plan"
    before = set(tmp_path.iterdir())
    code, stdout, stderr = run_main(capsys, [topo, "-o", out])
    assert code == 2, stderr
    assert expect in stderr, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert stderr.startswith("deepinfer-compile: error: ")
    assert set(tmp_path.iterdir()) == before  # no plan directory, no temporary left


def test_missing_topology_file_and_unknown_builtin_exit_2(tmp_path, capsys):
    code, _, err = run_main(capsys, [tmp_path / "none.yaml", "-o", tmp_path / "p"])
    assert code == 2 and "none.yaml: file not found" in err
    code, _, err = run_main(capsys, ["builtin:huge", "-o", tmp_path / "p"])
    assert code == 2 and "builtin:tiny-cpu" in err
    assert not (tmp_path / "p").exists()


def test_subprocess_reports_field_without_traceback(tmp_path):
    topo = tmp_path / "topology.yaml"
    topo.write_text(yaml.safe_dump(with_(parallel={"dp": 1, "eep": 2})))
    result = subprocess.run([sys.executable, "-m", "deepinfer.planner.cli", str(topo), "-o",
                             str(tmp_path / "plan")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"{topo}: parallel.eep: unknown key (did you mean 'ep'?)" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "plan").exists()


def test_subprocess_default_topology_and_explain(tmp_path):
    result = subprocess.run([sys.executable, "-m", "deepinfer.planner.cli", "--explain"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "## Memory budget per rank" in result.stdout
    plan = read_plan(tmp_path / "plan")
    assert plan["topology"]["source"] == "builtin:tiny-cpu"


def test_internal_error_exits_1_briefly(tmp_path, capsys, monkeypatch):
    def broken(topology):
        raise RuntimeError("pass exploded")

    monkeypatch.setattr(cli, "compile_plan", broken)
    code, _, err = run_main(capsys, ["-o", tmp_path / "plan"])
    assert code == 1 and "internal error: RuntimeError: pass exploded" in err
    assert "Traceback" not in err and not (tmp_path / "plan").exists()


def test_recompilation_is_byte_identical(tmp_path, capsys):
    for name in ("a", "b"):
        assert run_main(capsys, ["builtin:tiny-cpu-dp2-ep2", "-o", tmp_path / name])[0] == 0
    for file in ("plan.json", "manifest.json", "report.md"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
    # Compiling again into the same directory is fine (same plan).
    assert run_main(capsys, ["builtin:tiny-cpu-dp2-ep2", "-o", tmp_path / "a"])[0] == 0


def test_different_plan_needs_force(tmp_path, capsys):
    out = tmp_path / "plan"
    assert run_main(capsys, ["-o", out])[0] == 0
    first = read_plan(out)["plan_id"]
    code, _, err = run_main(capsys, ["builtin:tiny-cpu-dp2-ep2", "-o", out])
    assert code == 2 and "--force" in err
    assert read_plan(out)["plan_id"] == first
    assert run_main(capsys, ["builtin:tiny-cpu-dp2-ep2", "-o", out, "--force"])[0] == 0
    assert read_plan(out)["plan_id"] != first


def test_plan_id_follows_content_not_location(tmp_path):
    doc = yaml.safe_dump(TINY)
    setup_files(tmp_path, {"a/t.yaml": doc, "b/t.yaml": doc,
                           "c/t.yaml": yaml.safe_dump(with_(workload={"num_requests": 5}))})
    ids = [compile_plan(load_topology(tmp_path / d / "t.yaml"))["plan_id"] for d in "abc"]
    assert ids[0] == ids[1] != ids[2]


def test_plan_id_covers_model_config_and_load_stats(tmp_path):
    config = tiny_config()
    load = {"load": [[float(i + 1) for i in range(8)]] * 8}
    setup_files(tmp_path, {"ckpt/config.json": config, "stats.json": load,
                           "t.yaml": yaml.safe_dump(with_(model={"path": "ckpt"},
                                                          eplb={"load_stats": "stats.json"}))})
    topo = tmp_path / "t.yaml"
    first = compile_plan(load_topology(topo))
    config["text_config"]["rope_theta"] = 20000
    setup_files(tmp_path, {"ckpt/config.json": config})
    second = compile_plan(load_topology(topo))
    load["load"] = [[float(8 - i) for i in range(8)]] * 8
    setup_files(tmp_path, {"stats.json": load})
    third = compile_plan(load_topology(topo))
    assert len({first["plan_id"], second["plan_id"], third["plan_id"]}) == 3
    assert first["expert_placement"]["load_sources"]["prefill"] == str(tmp_path / "stats.json")


@pytest.fixture(scope="module")
def h200x8():
    topo = load_topology("builtin:v41-flash-h200x8")
    start = time.process_time()  # CPU seconds: the test machine's cores are shared
    plan = compile_plan(topo)
    return plan, time.process_time() - start


def test_full_size_compile_is_fast_and_complete(h200x8):
    plan, seconds = h200x8
    assert seconds < 10, f"compile took {seconds:.1f} CPU s"
    assert set(REQUIRED_KEYS) <= set(plan)
    assert len(plan["model"]["layers"]) == 40
    assert plan["cache"]["context_bytes_per_token"] == 890
    assert len(plan["expert_placement"]["prefill"]["phy2log"]) == 40
    assert plan["scheduler"]["lookahead_tokens"] == 0
    assert len(plan_json_bytes(plan)) < 4 * 2**20


def test_full_size_report(h200x8):
    plan, _ = h200x8
    report = render_report(plan)
    budget = plan["cache"]["memory_budget_per_rank"][0]
    assert f"{budget['weight_bytes'] / 2**30:,.2f} GiB" in report  # weights per rank
    assert "890 bytes per token of context" in report
    assert f"{plan['cache']['num_blocks']:,} blocks" in report
    assert "| 8K |" in report and "| 64K |" in report
    for probe in plan["cache"]["max_seqs_at_context"]:
        assert f"| {probe['context_tokens'] // 1024}K | {probe['blocks_per_seq']:,} | " \
               f"{probe['max_seqs']:,} |" in report
    assert "## Predicted step times" in report and "| decode |" in report
