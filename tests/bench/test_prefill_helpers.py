"""bench/prefill.py's eager-baseline estimate (pure arithmetic, no model)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from prefill import eager_estimate_s  # noqa: E402


def test_eager_estimate_fits_fixed_plus_per_token_time():
    # 10 s fixed + 2 ms per token: probes at 256 and 512 tokens -> 4,096 tokens ~ 18.2 s x 1.25
    half, full = 10 + 256 * 2e-3, 10 + 512 * 2e-3
    assert eager_estimate_s(half, full, 512, 4096) == pytest.approx((10 + 4096 * 2e-3) * 1.25)


def test_eager_estimate_of_a_mostly_fixed_cost_is_not_scaled_by_tokens():
    # the H200 case (session 6): 13.5 s at 512 tokens, about the same at 256; the measured 4K
    # prefill took 12.2 s, where scaling the probe by tokens predicted 108-178 s
    assert eager_estimate_s(13.5, 13.4, 512, 4096) == pytest.approx(13.4 * 1.25)
    assert eager_estimate_s(13.0, 13.5, 512, 4096) < 13.5 * 1.25 * 2


def test_batch_prefill_runs_both_modes_on_cpu(tmp_path):
    """--batch-prompts: N prompts in one generate, eager steps in flight and collected, in the
    table and the results JSON (CPU: the tiny plan); --op-stacks: the torch ops with the frames
    of our code that issued them; --host-phases-held: the phases of one more prefill (no GPU
    here to hold: no spin mark), every layer's enqueue in order."""
    import json
    import re
    import subprocess

    bench = Path(__file__).resolve().parents[2] / "bench" / "prefill.py"
    done = subprocess.run([sys.executable, str(bench), "--prompt-lens", "32", "--repeats", "1",
                           "--no-eager", "--no-profile", "--batch-prompts", "2", "--op-stacks",
                           "--host-phases-held", "20", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "| 2 x 32 | in_flight |" in done.stdout and "| 2 x 32 | collected |" in done.stdout
    (path,) = tmp_path.glob("*prefill.json")
    res = json.loads(path.read_text())
    ops = res["op_stacks"]
    assert ops and all(r["op"].startswith("aten::") for r in ops)
    assert any(r["stack"] for r in ops), ops  # the frames of our code that issued them
    assert all(re.fullmatch(r".+\.py\(\d+\): \S+", f) for r in ops for f in r["stack"]), ops
    assert "torch ops of one prefill" in done.stdout
    held = res["host_phases_held"]
    names = [name for name, _ in held["phases"]]
    layers = [n for n in names if n.startswith("layer ") and n.endswith(" enqueue")]
    assert held["hold_ms"] == 20 and names[-1] == "generate done", names
    assert layers == [f"layer {i} enqueue" for i in range(len(layers))] and layers, names
    # inside the first two layers, in their order; the window layout once, in layer 0's keys
    for i in (0, 1):
        at = [names.index(f"layer {i} {m}") for m in ("enqueue", "attention",
                                                       "attention's prefill part",
                                                       "window keys", "window keys done",
                                                       "ffn")]
        assert at == sorted(at), names
    assert names.count("window layout (first call)") == 1, names
    assert (names.index("layer 0 window keys") < names.index("window layout (first call)")
            < names.index("window layout built") < names.index("layer 0 window keys done"))
    assert not any(n.startswith("gpu released") for n in names), names
    times = [ms for _, ms in held["phases"]]
    assert times == sorted(times) and times[0] >= 0, held
    assert "host phases with the GPU held 20 ms first" in done.stdout
    (batch,) = res["prefill_batch"]
    assert batch["prompts"] == 2 and batch["prompt_len"] == 32 and batch["same_tokens"]
    for key in ("in_flight", "collected"):
        r = batch[key]
        assert r["time_ms"] > 0 and r["ms_per_prompt"] == pytest.approx(r["time_ms"] / 2)
        assert r["tokens_per_s"] == pytest.approx(64 / r["time_ms"] * 1e3)


def test_chunk_check_agrees_across_chunk_sizes_on_cpu(tmp_path):
    """bench/chunk_check.py on the tiny plan: one prompt prefilled in chunks of 32 and of 64
    tokens gives the same greedy tokens (chunked prefill against a larger chunk), reported in
    the table and the JSON."""
    import json
    import subprocess

    bench = Path(__file__).resolve().parents[2] / "bench" / "chunk_check.py"
    done = subprocess.run([sys.executable, str(bench), "--prompt-len", "80", "--chunks", "32,64",
                           "--tokens", "3", "--prompts", "1", "--repeats", "1",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (path,) = tmp_path.glob("*chunk_check.json")
    res = json.loads(path.read_text())
    assert [r["chunk"] for r in res["runs"]] == [32, 64]
    # the warm-up, the prompt and the lone prompt: 80 tokens in 3 chunks of 32 or 2 of 64
    assert [r["prefill_steps"] for r in res["runs"]] == [9, 6]
    (agree,) = res["agreement"]
    assert agree["identical"] == 1 and len(res["runs"][1]["tokens"][0]) == 3
    assert "| 64 |" in done.stdout and "1/1" in done.stdout


def test_chunk_diff_finds_no_difference_on_the_cpu_reference():
    """bench/chunk_diff.py on the tiny plan (reference kernels): a prompt prefilled in chunks of
    32 and in one chunk of 96 has bit-identical attention inputs, q and kv rows, top-k
    selections, attention and FFN outputs in every layer — and the table lists every layer."""
    import subprocess

    bench = Path(__file__).resolve().parents[2] / "bench" / "chunk_diff.py"
    done = subprocess.run([sys.executable, str(bench), "--prompt-len", "96", "--chunks", "32,96"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines()
            if line.startswith("| ") and line[2].isdigit()]
    kinds = {"attn_in", "q", "kv", "selection", "attn_out", "ffn_out"}
    assert len(rows) >= 8 * 5 and {r[1].strip() for r in rows} >= kinds
    assert all(r[2].strip() == "0" for r in rows), done.stdout


def test_held_host_phases_start_generate_behind_the_spin(monkeypatch):
    """host_phases(hold_ms=...) drains the GPU, enqueues the spin and then runs ``generate``
    with no drain in between (a drain there waits out the spin: round 166's held run began
    its generate 146 ms late), stamping each phase; the unheld run is unchanged."""
    import types

    import prefill

    calls = []

    class Worker:  # methods on classes, as the engine's: host_phases' marks shadow them
        def _enqueue(self):
            calls.append("enqueue")

    class Layer:
        def __init__(self, i):
            self.i = i

        def forward(self):
            calls.append(f"layer {self.i}")

    class Engine:
        def __init__(self):
            self.worker = Worker()

        def _inputs(self):
            calls.append("inputs")

        def _collect(self):
            calls.append("collect")

    class Model:
        def __init__(self):
            self.layers = [Layer(i) for i in range(3)]

        def _check(self):
            pass

        def _hash_ids(self):
            pass

        def _backbone(self):
            for layer in self.layers:
                layer.forward()

    engine, model = Engine(), Model()

    def generate(prompts, params):
        calls.append("generate")
        engine._inputs()
        engine.worker._enqueue()
        model._check()
        model._backbone()
        engine._collect()
        return [types.SimpleNamespace(token_ids=[0])]

    llm = types.SimpleNamespace(engine=engine, loaded=types.SimpleNamespace(model=model),
                                generate=generate)
    monkeypatch.setattr(prefill.bc, "sync", lambda: calls.append("sync"))
    monkeypatch.setattr(prefill, "gpu_hold", lambda ms: calls.append(f"hold {ms:g}") or ms)
    phases = prefill.host_phases(llm, 8, 100, hold_ms=150.0)
    start = calls.index("hold 150")
    assert calls[start - 1] == "sync" and calls[start + 1] == "generate", calls
    assert "sync" not in calls[start:calls.index("collect")], calls
    names = [name for name, _ in phases]
    assert names[0] == "gpu released (spin enqueued at 0)" and names[-1] == "generate done"
    assert [n for n in names if n.startswith("layer ")] == [f"layer {i} enqueue"
                                                            for i in range(3)]
    assert phases[0][1] == 150.0  # the spin's end, in ms after the spin was enqueued
    calls.clear()
    names = [name for name, _ in prefill.host_phases(llm, 8, 100)]
    assert "hold 0" not in calls and not any(n.startswith("gpu released") for n in names)
    assert calls.index("sync") < calls.index("generate"), calls  # prefill_s drains first


def test_prefill_ab_variants_parse_and_refuse_bad_ones():
    """prefill_ab.py's --variant NAME=FLAGS: kernel_overrides flags; a variant without '=', an
    unknown flag, a flag set other than the first variant's, one variant or repeated names
    exit with a message naming the variant."""
    import prefill_ab

    ok = prefill_ab.parse_variants(["quarters=--w4a16-prefill-parts 4 --w4a16-kernel ws",
                                    "eighths=--w4a16-kernel auto --w4a16-prefill-parts 8"])
    assert [(n, ns.w4a16_prefill_parts, ns.w4a16_kernel) for n, _, ns in ok] == \
        [("quarters", 4, "ws"), ("eighths", 8, "auto")]
    for bad, words in ((["off", "on=--w4a16-prefill-parts 8"], "NAME=FLAGS"),
                       (["a=--nope 1", "b=--w4a16-prefill-parts 8"], "--nope"),
                       (["a=--w4a16-prefill-parts 4", "b=--w4a16-kernel ws"], "same flags"),
                       (["a=--w4a16-prefill-parts 4"], "at least two"),
                       (["a=--w4a16-prefill-parts 4", "a=--w4a16-prefill-parts 8"], "differ")):
        with pytest.raises(SystemExit) as info:
            prefill_ab.parse_variants(bad)
        assert words in str(info.value), (bad, info.value)


def test_launch_constant_sets_an_integer_constant_and_refuses_the_rest(monkeypatch):
    """kernel_overrides' --launch-constant MODULE.NAME=INT sets the module's integer constant
    (what prefill_ab.py's variants switch between prefills); a malformed text, an unknown
    module or a name that is not an integer constant exits naming the text."""
    import kernel_overrides

    from deepinfer.kernels.triton import mhc_norm

    monkeypatch.setattr(mhc_norm, "BLOCK_D", mhc_norm.BLOCK_D)  # restored after the test
    ns = _overrides_namespace(["--launch-constant", "mhc_norm.BLOCK_D=1024"])
    kernel_overrides.apply_args(ns)
    assert mhc_norm.BLOCK_D == 1024
    for bad, words in (("mhc_norm.BLOCK_D", "MODULE.NAME=INT"), ("BLOCK_D=3", "MODULE.NAME=INT"),
                       ("mhc_norm.BLOCK_D=x", "MODULE.NAME=INT"),
                       ("nomodule.X=1", "no module"), ("mhc_norm.NOPE=1", "not an integer"),
                       ("mhc_norm.torch=1", "not an integer")):
        with pytest.raises(SystemExit) as info:
            kernel_overrides.set_launch_constant(bad)
        assert words in str(info.value) and repr(bad) in str(info.value), (bad, info.value)
    assert mhc_norm.BLOCK_D == 1024  # a refused text changes nothing
    # a full deepinfer module path reaches any module's constant (a runtime switch)
    kernel_overrides.set_launch_constant("deepinfer.kernels.triton.mhc_norm.BLOCK_D=512")
    assert mhc_norm.BLOCK_D == 512
    with pytest.raises(SystemExit) as info:
        kernel_overrides.set_launch_constant("deepinfer.runtime.nomodule.X=1")
    assert "no module deepinfer.runtime.nomodule" in str(info.value)


def test_launch_choice_sets_a_string_constant_and_refuses_the_rest(monkeypatch):
    """--launch-choice MODULE.NAME=WORD sets a string kernel choice
    (moe_gluon_w4a16_prefill.KERNEL); an integer constant, a malformed word or an unknown module
    exits naming the text."""
    import kernel_overrides

    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf

    monkeypatch.setattr(pf, "KERNEL", pf.KERNEL)
    kernel_overrides.apply_args(_overrides_namespace(["--launch-choice",
                                                      "moe_gluon_w4a16_prefill.KERNEL=ws"]))
    assert pf.KERNEL == "ws"
    for bad, words in (("moe_gluon_w4a16_prefill.KERNEL", "MODULE.NAME=WORD"),
                       ("moe_gluon_w4a16_prefill.KERNEL=a b", "MODULE.NAME=WORD"),
                       ("nomodule.X=a", "no module"),
                       ("moe_gluon_w4a16_prefill.PARTS=ws", "not a string")):
        with pytest.raises(SystemExit) as info:
            kernel_overrides.set_launch_choice(bad)
        assert words in str(info.value) and repr(bad) in str(info.value), (bad, info.value)
    assert pf.KERNEL == "ws"


def _overrides_namespace(argv: list[str]):
    import argparse

    import kernel_overrides

    ap = argparse.ArgumentParser()
    kernel_overrides.add_arguments(ap)
    return ap.parse_args(argv)


def test_prefill_ab_runs_interleaved_variants_on_cpu(tmp_path):
    """bench/prefill_ab.py on the tiny plan: one load, the variants interleaved per round, the
    medians and the fixed prompt's bits compared across variants, in the table and the JSON."""
    import json
    import subprocess

    bench = Path(__file__).resolve().parents[2] / "bench" / "prefill_ab.py"
    done = subprocess.run([sys.executable, str(bench), "--prompt-len", "32", "--rounds", "2",
                           "--repeats", "1", "--variant", "a=--w4a16-prefill-parts 4",
                           "--variant", "b=--w4a16-prefill-parts 8", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (path,) = tmp_path.glob("*prefill_ab.json")
    res = json.loads(path.read_text())
    assert [(r["variant"], r["round"]) for r in res["runs"]] == \
        [("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert set(res["medians_ms"]) == {"a", "b"} and res["same_tokens"] is True
    assert "| a | 1 |" in done.stdout and "against a" in done.stdout
    bad = subprocess.run([sys.executable, str(bench), "--variant", "a=--nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "--nope" in bad.stderr and "Traceback" not in bad.stderr
