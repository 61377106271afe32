"""Prefill throughput of the engine against the planner's roofline (issue 7).

    TRITON_INTERPRET=0 python bench/prefill.py [--prompt-lens 4096,16384] [--topology FILE]
        [--out DIR] [--no-eager]
    python bench/prefill.py --topology builtin:tiny-cpu        # CPU smoke: 512 and 1024

On the ``v41-flash-slice-h200`` plan (``num_blocks`` capped; no CUDA graphs: prefill does not
replay them), one prompt at a time of random ids (seeded) goes through ``llm.generate`` with
``max_tokens=1`` (the plan's prefill chunk is 4096 tokens, so 16K runs 4 chunks plus the first
token's sampling). Each length runs once to warm up (Triton compiles), then ``--repeats`` times
(median). Reported per length: time_ms, tokens_per_s = prompt_len / time, roofline_ms (the
planner's cost model over the ceilings measured on this GPU, ``bench/roofline.py``; datasheet
numbers on CPU), eta = roofline / measured, and compute_share = the roofline's compute time /
measured (the issue's target: >= 0.4 at 4K).

Eager baseline: the same engine with the torch reference backend swapped into the same model
(``model.kernels = KernelSet()``) at the shortest length, only if a short run (512 tokens)
predicts under ``--eager-budget-s``.

``--sync-sites``: one more prefill of the first length under torch's CUDA sync debug mode
(``host_syncs.py``): each op that makes the host wait for the GPU, by its call site in the
package (where the eager prefill's host gaps come from).

JSON: ``<out>/<date>-<gpu or cpu>-prefill.json``; the table is printed last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402
import host_syncs  # noqa: E402
import host_timeline  # noqa: E402
import kernel_overrides  # noqa: E402
import prefill_families  # noqa: E402

DEFAULTS = {"prompt_lens": ("4096,16384", "512,1024"), "eager_probe_len": (512, 128)}


def make_prompt(length: int, vocab_size: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, min(120000, vocab_size), (length,), generator=g).tolist()


def prefill_s(llm, *prompts: list[int]) -> float:
    """Wall seconds of the prompts through the engine (one ``generate``) up to their first
    tokens."""
    return first_tokens(llm, *prompts)[1]


def generate_first(llm, *prompts: list[int]) -> list:
    """One ``generate`` of the prompts up to their first (greedy) tokens, as it comes: no
    drain of the GPU before or after it."""
    from deepinfer.runtime.sampling_params import SamplingParams

    first = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    return llm.generate(list(prompts), first)


def first_tokens(llm, *prompts: list[int]) -> tuple[list[int], float]:
    """The prompts' first (greedy) tokens through the engine, one ``generate``, and its wall
    seconds (the GPU drained before and after)."""
    outs, wall_s = bc.timed(lambda: generate_first(llm, *prompts))
    return [o.token_ids[0] for o in outs], wall_s


def profiled(fn) -> tuple[float, list[tuple[float, float, str]]]:
    """Wall seconds of ``fn()`` under torch.profiler and its GPU intervals."""
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if torch.cuda.is_available() else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        _, wall_s = bc.timed(fn)
    return wall_s, bc.gpu_intervals(prof)


def batch_prefill(llm, length: int, vocab: int, prompts: int, roof: dict, repeats: int) -> dict:
    """``prompts`` prompts of ``length`` tokens in one ``generate`` (an offline batch: the
    scheduler packs chunks into steps of up to max_num_batched_tokens), with the eager steps
    in flight across schedules (the next step's host work and launches behind the current
    one's kernels) and without (each collected within its own step), interleaved; the median
    of ``repeats`` each. Tokens/s and compute share per prompt."""
    engine = llm.engine
    saved = engine.eager_in_flight
    times: dict[bool, list[float]] = {True: [], False: []}
    tokens: dict[bool, list[list[int]]] = {True: [], False: []}
    try:
        prefill_s(llm, *(make_prompt(length, vocab, 60 + i) for i in range(prompts)))  # warm
        for rep in range(repeats):
            for overlap in (True, False):
                engine.eager_in_flight = overlap
                seeds = range(100 * (rep + 1), 100 * (rep + 1) + prompts)
                toks, wall_s = first_tokens(llm, *(make_prompt(length, vocab, s) for s in seeds))
                times[overlap].append(wall_s)
                tokens[overlap].append(toks)
        busy, table = {}, None
        for overlap in (True, False):  # one more run each under the profiler: GPU busy time
            engine.eager_in_flight = overlap
            wall_s, ivs = profiled(lambda: prefill_s(llm, *(make_prompt(length, vocab, 900 + i)
                                                             for i in range(prompts))))
            busy[overlap] = (wall_s * 1e3, bc.busy_us(ivs) / 1e3)
            if overlap:  # the kernels of the whole batch (steps in flight)
                table = {"prompt_len": length, "prompts": prompts, "mode": "eager prefill",
                         "replays": 1, "wall_ms_per_replay": wall_s * 1e3,
                         "gpu_busy_ms_per_replay": bc.busy_us(ivs) / 1e3,
                         "kernels": [{**r, "us_per_replay": r["total_us"]}
                                     for r in bc.kernel_table(ivs, 40)],
                         "idle_before": bc.idle_by_next(ivs, 12)}
    finally:
        engine.eager_in_flight = saved
    compute_ms = roof["compute_ms"] * roof["steps"]  # one prompt's
    # the same prompts in both modes: the same first tokens (one stream orders the steps)
    out = {"prompt_len": length, "prompts": prompts,
           "same_tokens": tokens[True] == tokens[False], "kernels": table}
    for overlap, key in ((True, "in_flight"), (False, "collected")):
        t_ms = statistics.median(times[overlap]) * 1e3
        out[key] = {"time_ms": t_ms, "ms_per_prompt": t_ms / prompts,
                    "tokens_per_s": prompts * length / t_ms * 1e3,
                    "compute_share": compute_ms * prompts / t_ms,
                    "profiled_wall_ms": busy[overlap][0], "gpu_busy_ms": busy[overlap][1]}
        print(f"prefill {prompts} x {length} ({key}): {t_ms:.1f} ms, "
              f"{t_ms / prompts:.1f} ms per prompt", flush=True)
    return out


def eager_estimate_s(half_s: float, probe_s: float, probe_len: int, length: int) -> float:
    """The reference's time at ``length`` tokens from warm probes at probe_len // 2 and
    probe_len tokens: fixed + per-token time fitted through the two (the slope clamped at 0:
    timing noise), extrapolated, with a 25 % margin (attention grows faster than linearly)."""
    per_token_s = max(probe_s - half_s, 0.0) / (probe_len - probe_len // 2)
    return (probe_s + per_token_s * (length - probe_len)) * 1.25


def eager_baseline(llm, length: int, probe_len: int, budget_s: float) -> dict:
    """The reference backend swapped into the model: two probe runs predict the full one.

    A short warm-up first (a cold first call carries one-time costs), then probes of half and
    all of ``probe_len`` tokens fit time = fixed + per-token x n: the reference's time is mostly
    fixed per call (session 6 on the H200: 13.5 s for a warm 512-token probe, 12.2 s for the full
    4,096 tokens), so scaling the probe by tokens over-estimated it 11x and skipped it."""
    from deepinfer.kernels.registry import KernelSet

    model = llm.loaded.model
    vocab = llm.loaded.spec.vocab_size
    saved, model.kernels = model.kernels, KernelSet()
    try:
        prefill_s(llm, make_prompt(min(64, probe_len), vocab, 7))  # warm-up
        half_s = prefill_s(llm, make_prompt(probe_len // 2, vocab, 6))
        probe_s = prefill_s(llm, make_prompt(probe_len, vocab, 8))
        estimate_s = eager_estimate_s(half_s, probe_s, probe_len, length)
        out = {"prompt_len": length, "probe_len": probe_len, "probe_s": probe_s,
               "half_probe_s": half_s, "estimate_s": estimate_s}
        if estimate_s > budget_s:
            out["skipped"] = f"estimated {estimate_s:.0f} s > budget {budget_s:.0f} s"
            return out
        out["time_ms"] = prefill_s(llm, make_prompt(length, vocab, 9)) * 1e3
        out["tokens_per_s"] = length / out["time_ms"] * 1e3
        return out
    except Exception as err:  # noqa: BLE001 - out of memory, or the reference refusing
        return {"prompt_len": length, "error": repr(err)[:300]}
    finally:
        model.kernels = saved


def prefill_profile(llm, length: int, vocab: int) -> dict:
    """GPU time per kernel over one prefill of ``length`` tokens (torch.profiler)."""
    wall_s, ivs = profiled(lambda: prefill_s(llm, make_prompt(length, vocab, 40)))
    return {"prompt_len": length, "mode": "eager prefill", "replays": 1,
            "wall_ms_per_replay": wall_s * 1e3, "gpu_busy_ms_per_replay": bc.busy_us(ivs) / 1e3,
            "kernels": [{**r, "us_per_replay": r["total_us"]} for r in bc.kernel_table(ivs, 40)],
            "idle_before": bc.idle_by_next(ivs, 12), "idle_windows": bc.idle_windows(ivs)}


def op_stacks(llm, length: int, vocab: int) -> list[dict]:
    """One more prefill under torch.profiler with shapes and Python stacks: the torch ops by
    own device time, each with the frames of our code that issued it (``bc.op_table``)."""
    from torch.profiler import ProfilerActivity, profile

    from deepinfer.runtime import engine  # its package's directory: our frames

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available()
                                           else [])
    # the forward enqueued inline: the profiler records the torch ops of its own thread only
    worker = llm.engine.worker
    executor, worker._executor = worker._executor, None
    try:
        with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            bc.timed(lambda: prefill_s(llm, make_prompt(length, vocab, 43)))
    finally:
        worker._executor = executor
    # torch names a frame by its file relative to a sys.path entry, or absolute, through
    # whatever path the interpreter loaded it by (round 166: none matched the resolved package
    # directory on the device — every row "?"): our files matched by their package paths
    rows = bc.op_table(prof, bc.package_files(Path(engine.__file__).resolve().parents[1]),
                       top=15)
    if rows and not any(r["stack"] for r in rows):  # say what the frames were named instead
        print("no frame matched our files; the profile's frames:", bc.frame_census(prof),
              flush=True)
    return rows


def gpu_hold(ms: float) -> float:
    """Enqueue a spin of ~``ms`` milliseconds on the current CUDA stream (``torch.cuda._sleep``,
    its cycles per ms measured here first): the kernels enqueued behind it cannot start until
    it ends. Returns ``ms`` (0 without CUDA: nothing enqueued)."""
    if not torch.cuda.is_available() or ms <= 0:
        return 0.0
    probe_cycles = 10_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(probe_cycles)
    end.record()
    end.synchronize()
    cycles_per_ms = probe_cycles / max(start.elapsed_time(end), 1e-3)
    start.record()
    torch.cuda._sleep(int(ms * cycles_per_ms))
    end.record()
    return ms


def host_phases(llm, length: int, vocab: int, hold_ms: float = 0.0
                ) -> list[tuple[str, float]]:
    """Host timestamps (ms after ``generate`` began) of one prefill's phases: the engine's
    inputs, the launch on the worker thread, the forward's check / engram hash / backbone
    (entered, and left: every kernel enqueued) / each layer's start, the result collected,
    ``generate`` done. Where
    the GPU waits for the host (the profile's idle gaps) in the host's own terms.

    ``hold_ms`` > 0: the GPU is first held by a spin of that length (``gpu_hold``), so the
    layers' enqueue runs at the host's own pace, with nothing on the GPU to wait for — unless
    a host sync or a full launch queue stops it, which then shows as an enqueue that ends
    near the spin's end ("gpu released") instead of well before it. The difference to the
    unheld phases says whether the lone prompt is host-paced or the host waits on the GPU."""
    from deepinfer.runtime.model.batch import ForwardBatch

    engine, model = llm.engine, llm.loaded.model
    marks: list[tuple[str, float]] = []

    def mark(obj, name: str, enter: str | None, leave: str | None, once: bool = False):
        """Stamp ``obj.name``'s calls (``once``: its first call only)."""
        fn = getattr(obj, name)
        own = vars(obj).get(name)  # a class's own function, restored as it was
        calls = [0]

        def wrapped(*a, **k):
            calls[0] += 1
            stamp = calls[0] == 1 or not once
            if enter and stamp:
                marks.append((enter, time.perf_counter()))
            out = fn(*a, **k)
            if leave and stamp:
                marks.append((leave, time.perf_counter()))
            return out
        # on an instance: an attribute that shadows the method; on a class: its own function
        setattr(obj, name, wrapped)
        return lambda: setattr(obj, name, own) if own is not None else delattr(obj, name)

    undo = [mark(engine, "_inputs", "engine inputs", "inputs built"),
            mark(engine.worker, "_enqueue", "step enqueue starts", None),
            mark(model, "_check", "forward checks", None),
            mark(model, "_hash_ids", "engram hash", "engram hash built"),
            mark(model, "_backbone", "backbone enqueue", "backbone enqueued"),
            mark(engine, "_collect", None, "result collected")]
    undo += [mark(block, "forward", f"layer {i} enqueue", None)  # the host's pace per layer
             for i, block in enumerate(model.layers)]
    # inside the first two layers (the first one's once-per-forward work — round 166: layer 0
    # enqueued in 5.9 ms, layer 1 of the same kind in 3.2): attention, its window keys, FFN
    inner = [(getattr(block, part, None), name, f"layer {i} {enter}",
              leave and f"layer {i} {leave}")
             for i, block in enumerate(model.layers[:2])
             for part, name, enter, leave in (
                 ("attn", "forward", "attention", None),
                 ("attn", "_prefill_attention", "attention's prefill part", None),
                 ("attn", "_window_keys", "window keys", "window keys done"),
                 ("ffn", "forward", "ffn", None))]
    inner += [(block, "attn_input", f"layer {i} attention input", None)
              for i, block in enumerate(model.layers[:2])]
    # the first engram layer's injection (round 166: 1.6 ms of host time between the hash's
    # start and layer 1's block, 2.5 ms behind a held GPU)
    inner += [(block.engram, "forward", f"layer {i} engram injection", f"layer {i} engram done")
              for i, block in enumerate(model.layers) if hasattr(block, "engram")][:1]
    undo += [mark(*m) for m in inner if hasattr(m[0], m[1])]
    undo += [mark(ForwardBatch, "window_layout", "window layout (first call)",
                  "window layout built", once=True),
             mark(ForwardBatch, "window_indices", "window indices (first call)",
                  "window indices built", once=True)]
    try:
        prompt = make_prompt(length, vocab, 44 if hold_ms > 0 else 42)
        if hold_ms > 0:
            bc.sync()
            t0 = time.perf_counter()
            if gpu_hold(hold_ms):
                marks.append(("gpu released (spin enqueued at 0)", t0 + hold_ms / 1e3))
            # no drain here (``prefill_s`` drains first: it would wait out the spin — round
            # 166's held run began its generate at 145.9 ms)
            generate_first(llm, prompt)
        else:
            t0 = time.perf_counter()
            prefill_s(llm, prompt)
        marks.append(("generate done", time.perf_counter()))
        bc.sync()
    finally:
        for u in undo:
            u()
    return [(name, round((t - t0) * 1e3, 3)) for name, t in marks]


def host_timeline_held(llm, length: int, vocab: int, hold_ms: float) -> dict:
    """One prefill behind a GPU spin of ``hold_ms`` under ``host_timeline``: every call of the
    package (and each Triton launch and torch op it makes) with its own start and time, the
    GPU never waited for. Returns the text of the spans up to layer 2's start (the lone
    prompt's host-paced first layers) and the self-time tables of layer 0 (with the inputs
    before it) and of layer 1."""
    import deepinfer.runtime

    root = Path(deepinfer.runtime.__file__).parent.parent  # runtime/, kernels/, … beside it
    prompt = make_prompt(length, vocab, 45)
    bc.sync()
    gpu_hold(hold_ms)
    _, spans = host_timeline.record(lambda: generate_first(llm, prompt), root)
    bc.sync()
    layer = "model/block.py:Block.forward"
    l1, l2 = (host_timeline.first_start(spans, layer, n) for n in (2, 3))
    end = spans[-1].start_ms + spans[-1].duration_ms if spans else 0.0
    l1, l2 = l1 or end, l2 or end
    first = host_timeline.format_self_time(spans, l1)
    second = host_timeline.format_self_time([s for s in spans if s.start_ms >= l1], l2)
    return {"hold_ms": hold_ms, "layer1_ms": l1, "layer2_ms": l2, "end_ms": end,
            "spans": host_timeline.format_spans(spans, l2, min_us=40.0),
            "self_before_layer1": first, "self_layer1": second}


def host_profile(llm, length: int, vocab: int, top: int = 60) -> dict:
    """cProfile of one prefill's host work: ``generate`` on the calling thread and the
    worker's ``_enqueue`` (the forward's launches, on the worker's thread for an eager step);
    the ``top`` functions by own time and by cumulative time, as text. Python 3.12+ profiles
    every thread from one profiler (sys.monitoring: a second one is refused), so the worker's
    calls are in ``generate``'s; before 3.12 they get a profiler of their own. What the host
    spends while the GPU waits in the profile's early idle gaps."""
    import cProfile
    import io
    import pstats

    per_thread = sys.version_info < (3, 12)
    worker = llm.engine.worker
    fn, prof_worker = worker._enqueue, cProfile.Profile()

    def enqueue(*a, **k):
        prof_worker.enable()
        try:
            return fn(*a, **k)
        finally:
            prof_worker.disable()
    if per_thread:
        worker._enqueue = enqueue  # an instance attribute: shadows the method
    prof_main = cProfile.Profile()
    try:
        prompt = make_prompt(length, vocab, 43)
        prof_main.enable()
        prefill_s(llm, prompt)
        prof_main.disable()
    finally:
        if per_thread:
            del worker._enqueue
    out = {}
    profs = [("generate", prof_main)] + ([("worker_enqueue", prof_worker)] if per_thread else [])
    for name, prof in profs:
        text = []
        for key in ("tottime", "cumulative"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)
            text.append(buf.getvalue())
        out[name] = "\n".join(text)
    return out


def run(args, root: Path, progress) -> dict:
    from deepinfer.artifacts.plan_dir import read_plan
    from deepinfer.runtime import LLM

    topology = bc.default_topology(args.topology)
    res = bc.header(topology)
    print("versions", res["versions"], "commit", res["commit"], flush=True)

    def blocks_needed(compiled: dict) -> int:  # the batch's prompts all at once
        prompts = max(args.batch_prompts, 1)
        return prompts * max(args.prompt_lens) // compiled["scheduler"]["block_size_tokens"] \
            + 64 * prompts

    plan_dir = bc.make_plan_dir(root, topology, blocks_needed)
    plan = read_plan(plan_dir)
    res["plan_id"], res["num_blocks"] = plan["plan_id"], plan["scheduler"]["num_blocks"]
    res["prefill_chunk_tokens"] = plan["scheduler"]["prefill_chunk_size_tokens"]
    llm, res["load_s"] = bc.timed(lambda: LLM(plan_dir, cuda_graphs=False,
                                              log=lambda line: print(line, flush=True)))
    print(f"load {res['load_s']:.1f} s", flush=True)
    res["ceilings"] = bc.ceilings(plan)
    roofs = {r["prompt_len"]: r for r in bc.roofline().rooflines(
        plan, [], args.prompt_lens, res["ceilings"])["prefill"]}
    vocab = llm.loaded.spec.vocab_size
    res["prefill"] = []
    for length in args.prompt_lens:
        if length + 1 > llm.max_model_len:
            print(f"skip {length}: exceeds max_model_len {llm.max_model_len}", flush=True)
            continue
        warm_s = prefill_s(llm, make_prompt(length, vocab, 1))
        times = [prefill_s(llm, make_prompt(length, vocab, 2 + i)) for i in range(args.repeats)]
        t_ms = statistics.median(times) * 1e3
        r = roofs[length]
        compute_ms = r["compute_ms"] * r["steps"]
        res["prefill"].append({
            "prompt_len": length, "tokens_per_s": length / t_ms * 1e3, "time_ms": t_ms,
            "warmup_ms": warm_s * 1e3, "roofline_ms": r["prompt_roofline_ms"],
            "eta": r["prompt_roofline_ms"] / t_ms, "compute_roofline_ms": compute_ms,
            "compute_share": compute_ms / t_ms, "bound": r["bound"],
            "roofline_steps": r["steps"]})
        print(f"prefill {length}: {t_ms:.1f} ms (warm-up {warm_s * 1e3:.0f} ms), roofline "
              f"{r['prompt_roofline_ms']:.2f} ms", flush=True)
        progress(res)
    if args.batch_prompts > 1:
        res["prefill_batch"] = [batch_prefill(llm, length, vocab, args.batch_prompts,
                                              roofs[length], args.repeats)
                                for length in args.prompt_lens
                                if length + 1 <= llm.max_model_len]
        for b in res["prefill_batch"]:
            if b.get("kernels"):
                b["kernel_families"] = prefill_families.from_profile(b["kernels"], plan,
                                                                     res["ceilings"])
        progress(res)
    if not args.no_profile and res["prefill"]:
        res["kernels"] = prefill_profile(llm, res["prefill"][0]["prompt_len"], vocab)
        res["kernel_families"] = prefill_families.from_results(res, plan)
    if args.host_phases and res["prefill"]:
        res["host_phases"] = host_phases(llm, res["prefill"][0]["prompt_len"], vocab)
        print("host phases (ms after generate began):", flush=True)
        for name, ms in res["host_phases"]:
            print(f"  {ms:9.3f}  {name}", flush=True)
    if args.host_phases_held and res["prefill"]:
        hold = args.host_phases_held
        res["host_phases_held"] = {"hold_ms": hold, "phases": host_phases(
            llm, res["prefill"][0]["prompt_len"], vocab, hold_ms=hold)}
        print(f"host phases with the GPU held {hold:g} ms first (the host's own pace; "
              "ms after generate began):", flush=True)
        for name, ms in sorted(res["host_phases_held"]["phases"], key=lambda m: m[1]):
            print(f"  {ms:9.3f}  {name}", flush=True)
    if args.host_timeline_held and res["prefill"]:
        t = res["host_timeline_held"] = host_timeline_held(
            llm, res["prefill"][0]["prompt_len"], vocab, args.host_timeline_held)
        print(f"host timeline, the GPU held {t['hold_ms']:g} ms first (layer 1 enqueued from "
              f"{t['layer1_ms']:.2f} ms, layer 2 from {t['layer2_ms']:.2f}, generate done "
              f"{t['end_ms']:.2f}; the profile hook inflates every span):\n{t['spans']}\n"
              f"self time before layer 1:\n{t['self_before_layer1']}\n"
              f"self time of layer 1:\n{t['self_layer1']}", flush=True)
    if args.host_profile and res["prefill"]:
        res["host_profile"] = host_profile(llm, res["prefill"][0]["prompt_len"], vocab)
        for name, text in res["host_profile"].items():
            print(f"host profile, {name}:\n{text}", flush=True)
    if args.op_stacks and res["prefill"]:
        res["op_stacks"] = op_stacks(llm, res["prefill"][0]["prompt_len"], vocab)
        bc.print_op_table("torch ops of one prefill by own device time (shapes, our frames):",
                          res["op_stacks"])
    if args.sync_sites and res["prefill"]:
        import deepinfer

        length = res["prefill"][0]["prompt_len"]
        _, sites = host_syncs.collect(lambda: prefill_s(llm, make_prompt(length, vocab, 41)),
                                      Path(deepinfer.__file__).parent)
        res["sync_sites"] = {"prompt_len": length, "sites": sites}
    res["eager"] = None
    if not args.no_eager and res["prefill"]:
        shortest = res["prefill"][0]["prompt_len"]
        res["eager"] = eager_baseline(llm, shortest, args.eager_probe_len, args.eager_budget_s)
        if "time_ms" in res["eager"]:
            res["eager"]["speedup"] = res["eager"]["time_ms"] / res["prefill"][0]["time_ms"]
        print(f"eager reference: {res['eager']}", flush=True)
    res["engine_stats"] = llm.engine.stats.summary()
    llm.engine.worker.close()
    return res


def report(res: dict) -> None:
    """The table (also of a partial result)."""
    res.setdefault("prefill", [])
    c = res.get("ceilings") or {"source": "not measured", "hbm_bytes_per_s": 0,
                                "bf16_flops_per_s": 0, "fp8_flops_per_s": 0}
    print(f"\n## prefill — {res['gpu']}, commit {res['commit'][:10]}, {res['date']}")
    print(f"ceilings ({c['source']}): HBM {c['hbm_bytes_per_s'] / 1e12:.2f} TB/s, "
          f"bf16 {c['bf16_flops_per_s'] / 1e12:.3g} TFLOP/s, fp8 "
          f"{c['fp8_flops_per_s'] / 1e12:.3g} TFLOP/s; prefill chunk "
          f"{res.get('prefill_chunk_tokens')} tokens; load {res.get('load_s', 0):.1f} s "
          "(no graphs)")
    print("\n| prompt | tokens/s | time ms | roofline ms | η | compute roofline ms | "
          "compute share |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for p in res["prefill"]:
        print(f"| {p['prompt_len']} | {p['tokens_per_s']:,.0f} | {p['time_ms']:.1f} | "
              f"{p['roofline_ms']:.2f} | {p['eta']:.3f} | {p['compute_roofline_ms']:.2f} | "
              f"{p['compute_share']:.3f} |")
    if res.get("prefill_batch"):
        same = all(b["same_tokens"] for b in res["prefill_batch"])
        print("\nprompts in one generate (eager steps in flight across schedules / each "
              f"collected in its own step; the same first tokens in both: {same}):\n")
        print("| prompts x len | mode | ms | ms per prompt | tokens/s | compute share | "
              "profiled: wall / GPU busy ms |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for b in res["prefill_batch"]:
            for key in ("in_flight", "collected"):
                r = b[key]
                print(f"| {b['prompts']} x {b['prompt_len']} | {key} | {r['time_ms']:.1f} | "
                      f"{r['ms_per_prompt']:.1f} | {r['tokens_per_s']:,.0f} | "
                      f"{r['compute_share']:.3f} | {r['profiled_wall_ms']:.1f} / "
                      f"{r['gpu_busy_ms']:.1f} |")
    if res.get("kernels"):
        bc.print_kernel_profile(f"kernels of one {res['kernels']['prompt_len']}-token prefill",
                                res["kernels"])
    if res.get("kernel_families"):
        print(f"\nits kernels by family, each against its own compute floor "
              f"(bench/prefill_families.py):\n{prefill_families.table(res['kernel_families'])}")
    for b in res.get("prefill_batch") or []:
        if b.get("kernels"):
            bc.print_kernel_profile(f"kernels of {b['prompts']} x {b['prompt_len']}-token "
                                    "prompts in one generate (steps in flight)", b["kernels"])
        if b.get("kernel_families"):
            print(f"\nby family:\n{prefill_families.table(b['kernel_families'])}")
    syncs = res.get("sync_sites")
    if syncs:
        print(f"\nhost syncs in one {syncs['prompt_len']}-token prefill: "
              f"{sum(s['count'] for s in syncs['sites'])}")
        for s in syncs["sites"][:12]:
            print(f"  {s['count']:5d}  {s['site']}")
    e = res.get("eager")
    if e is None:
        print("eager reference: not run")
    elif "time_ms" in e:
        print(f"eager reference at {e['prompt_len']}: {e['time_ms']:.1f} ms "
              f"({e['tokens_per_s']:,.0f} tok/s); speedup of ours: {e['speedup']:.1f}×")
    else:
        print(f"eager reference at {e['prompt_len']}: {e.get('skipped') or e.get('error')} "
              f"(probe {e.get('probe_len')} tokens: {e.get('probe_s', 0):.2f} s)")


def print_target(res: dict) -> None:
    """The issue's prefill target: >= 40% of the compute roofline at 4K."""
    at_4k = [p for p in res["prefill"] if p["prompt_len"] == 4096]
    if not at_4k:
        print("target compute share >= 0.4 at 4K: not measured")
        return
    share = at_4k[0]["compute_share"]
    print(f"target compute share >= 0.4 at 4K: {share:.3g}: "
          f"{'met' if share >= 0.4 else 'NOT met'}{bc.target_card_note(res.get('gpu'))}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt-lens", default=None, help="default 4096,16384 (CPU: 512,1024)")
    ap.add_argument("--topology", default=None, help="default: the slice plan (CPU: tiny-cpu)")
    ap.add_argument("--out", type=Path, action="append", default=None,
                    help="results folder (repeatable); default bench/results")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-prompts", type=int, default=0,
                    help="also N prompts of each length in one generate, the eager steps in "
                         "flight across schedules or not (A/B); 0: off")
    ap.add_argument("--no-eager", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--sync-sites", action="store_true",
                    help="one more prefill under the CUDA sync debug mode: host syncs by site")
    ap.add_argument("--host-phases", action="store_true",
                    help="one more prefill with host timestamps of its phases")
    ap.add_argument("--host-phases-held", type=float, default=0.0, metavar="MS",
                    help="one more prefill with host phase timestamps behind a GPU spin of MS "
                         "ms (the host's enqueue pace with nothing to wait for); 0: off")
    ap.add_argument("--host-timeline-held", type=float, default=0.0, metavar="MS",
                    help="one more prefill behind a GPU spin of MS ms under a profile hook: "
                         "the host's calls, launches and torch ops with their times up to "
                         "layer 2 (host_timeline.py); 0: off")
    ap.add_argument("--op-stacks", action="store_true",
                    help="one more prefill profiled with shapes and stacks: torch ops by device "
                         "time and the code that issued them")
    ap.add_argument("--host-profile", action="store_true",
                    help="cProfile one prefill's host work (generate and the worker's enqueue)")
    ap.add_argument("--eager-probe-len", type=int, default=None, help="default 512 (CPU: 128)")
    ap.add_argument("--eager-budget-s", type=float, default=60.0)
    ap.add_argument("--report", type=Path, default=None,
                    help="only print the table of a (partial) results JSON")
    kernel_overrides.add_arguments(ap)
    args = ap.parse_args()
    for flag in ("host_phases_held", "host_timeline_held"):
        if getattr(args, flag) < 0:
            ap.error(f"--{flag.replace('_', '-')}: expected a spin in ms >= 0 (0: off), got "
                     f"{getattr(args, flag):g}")
    if args.batch_prompts == 1 or args.batch_prompts < 0:
        ap.error(f"--batch-prompts: expected 0 (off) or at least 2, got {args.batch_prompts}")
    kernel_overrides.apply_args(args)
    if args.report is not None:
        res = json.loads(args.report.read_text())
        report(res)
        print_target(res)
        return 0
    cuda = torch.cuda.is_available()
    args.prompt_lens = [int(x) for x in (args.prompt_lens or
                                         DEFAULTS["prompt_lens"][not cuda]).split(",") if x]
    if args.eager_probe_len is None:
        args.eager_probe_len = DEFAULTS["eager_probe_len"][not cuda]
    res = bc.run_with_partials("prefill", args.out,
                               lambda root, progress: run(args, root, progress))
    report(res)
    print_target(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
