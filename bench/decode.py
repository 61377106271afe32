"""Decode throughput of the engine's CUDA graphs against the planner's roofline (issue 7).

    TRITON_INTERPRET=0 python bench/decode.py [--batches 1,8,32,64,128,256]
        [--contexts 4096,32768] [--topology FILE] [--out DIR] [--no-eager] [--no-profile]
    python bench/decode.py --topology builtin:tiny-cpu --batches 1,8,16 --contexts 256,1024

On the ``v41-flash-slice-h200`` plan (``num_blocks`` capped at what the largest point needs):

- Ceilings: HBM copy bandwidth, bf16 and fp8 matmul rates measured first on this GPU
  (``bench/roofline.py``; datasheet numbers on CPU).
- Start-up: ``LLM(plan_dir)`` (plan load, weights generated on the GPU, CUDA-graph capture)
  and the first token of a 16-token request; whether the Triton cache was cold before. By
  default only the benchmarked batch sizes are captured (``--graph-buckets bench``: a cold
  start with all 36 plan buckets did not fit a device round); the capture time of the full
  bucket list is then estimated from the per-bucket times (``--graph-buckets plan`` measures
  it).
- Decode points (batch, context C): no prefill; the cache state is fabricated — each of the
  ``batch`` rows owns a state slot and ``ceil((C + 1) / block_size)`` distinct blocks, and the
  pools hold valid records (a few thousand random rows packed by ``kernels/formats.py`` and
  tiled: window rings, compressed entries and index keys of every KV source). Every row is at
  position C. ``DecodeGraphs.run`` is timed with CUDA events around each replay after
  warm-up (median): step_ms, tokens_per_s = batch / step, roofline_ms from the planner's cost
  model, eta = roofline / measured. A point the cache cannot hold is reported and skipped.
- Eager baseline: the same ``forward_decode`` with the torch reference backend swapped into
  the same model (``model.kernels = KernelSet()``), same weights, shapes and cache state.
- Per-kernel breakdown: ``torch.profiler`` over a few replays at one or two points.
- Host time and GPU idle gap: the real engine loop (``llm.generate``, short prompts, greedy,
  ignore_eos) once plain (``EngineStats``: host time per step) and once under the profiler:
  for each decode step launched right after another, the GPU idle time right before the first
  GPU activity after its launch (0 when the pipeline queued it behind the running step),
  median and p90. CPU: host time only.

JSON: ``<out>/<date>-<gpu or cpu>-decode.json``; the tables are printed last.
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
import kernel_overrides  # noqa: E402
from decode_report import report  # noqa: E402

RECORD_ROWS = 4093  # random rows packed per record kind, tiled over the pools
LAUNCH_MARK = bc.MARK_PREFIX + "worker_launch"
DEFAULTS = [("batches", "1,8,32,64,128,256", "1,8,16"), ("contexts", "4096,32768", "256,1024"),
            ("eager_points", "1x4096,64x4096", "1x256,16x256"), ("gap_prompts", 64, 16),
            ("gap_prompt_len", 128, 32), ("gap_tokens", 64, 16)]


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


# ---- the fabricated cache state -------------------------------------------------------------
def _tile(flat: torch.Tensor, records: torch.Tensor, chunk_rows: int = 1 << 20) -> None:
    """Fill the uint8 (rows, bytes) view ``flat`` in place with ``records`` repeated."""
    records = records.to(flat.device)
    for lo in range(0, flat.shape[0], chunk_rows):
        hi = min(flat.shape[0], lo + chunk_rows)
        idx = torch.arange(lo, hi, device=flat.device) % records.shape[0]
        flat[lo:hi] = records[idx]


def fabricate_cache(pool, model, num_slots: int, num_blocks: int, seed: int = 0) -> None:
    """Valid records in state slots [0, num_slots) and blocks [0, num_blocks) of every pool
    (sentinels included, so padding rows read finite values too)."""
    from deepinfer.kernels import formats

    spec = pool.spec
    g = torch.Generator().manual_seed(seed)
    window = formats.pack_window_kv(torch.randn(RECORD_ROWS, spec.head_dim, generator=g))
    _tile(pool.window[:num_slots].view(-1, pool.window.shape[-1]), window)
    entries = formats.pack_compressed_kv(torch.randn(RECORD_ROWS, spec.head_dim, generator=g))
    keys = formats.pack_index_key(torch.randn(RECORD_ROWS, spec.index_head_dim, generator=g))
    for s in pool.entries:
        _tile(pool.entries[s][:num_blocks].view(-1, entries.shape[-1]), entries)
        _tile(pool.index_keys[s][:num_blocks].view(-1, keys.shape[-1]), keys)
    token_map = getattr(model, "token_map", None)
    if token_map is not None:  # engram n-gram history: normalized ids of random tokens
        ids = torch.randint(3, spec.vocab_size, pool.engram_history[:num_slots].shape,
                            generator=g)
        pool.engram_history[:num_slots] = token_map[ids.to(token_map.device)]
    bc.sync()


def blocks_per_row(context: int, block_size: int) -> int:
    return -(-(context + 1) // block_size)  # positions 0..C: the new token's entry included


def point_inputs(batch: int, context: int, block_size: int, vocab_size: int):
    """Host arrays for ``DecodeGraphs.run``: ids, positions (all C), slots 1..batch, tables."""
    import numpy as np

    rng = np.random.default_rng(batch * 100003 + context)
    nb = blocks_per_row(context, block_size)
    ids = rng.integers(3, vocab_size, batch, dtype=np.int64)
    positions = np.full(batch, context, dtype=np.int64)
    slots = np.arange(1, batch + 1, dtype=np.int64)
    tables = 1 + np.arange(batch * nb, dtype=np.int64).reshape(batch, nb)
    return ids, positions, slots, tables


def why_not(graphs, batch: int, context: int, max_model_len: int) -> str | None:
    pool = graphs.pool
    need = batch * blocks_per_row(context, pool.block_size_tokens) + 1
    if need > pool.num_blocks:
        return (f"needs {need} blocks (batch x ceil((C+1)/{pool.block_size_tokens}) + sentinel),"
                f" the plan's cache has {pool.num_blocks}")
    if batch + 1 > pool.num_state_slots:
        return f"needs {batch + 1} state slots, the plan has {pool.num_state_slots}"
    if batch > graphs.buckets[-1]:
        return f"batch {batch} exceeds the largest decode bucket {graphs.buckets[-1]}"
    if context + 1 > max_model_len:
        return f"context {context} + 1 exceeds max_model_len {max_model_len}"
    return None


# ---- timing ------------------------------------------------------------------------------------
def replay_ms(graphs, inputs, iters: int, warmup: int = 3) -> float:
    """Median time of one ``graphs.run`` (CUDA events on a GPU, wall clock on CPU)."""
    for _ in range(warmup):
        graphs.run(*inputs)
    bc.sync()
    times = []
    if torch.cuda.is_available():
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(iters)]
        for start, end in pairs:
            start.record()
            graphs.run(*inputs)
            end.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in pairs]
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            graphs.run(*inputs)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def eager_ms(model, pool, inputs, context: int, iters: int, budget_s: float = 30.0) -> dict:
    """``forward_decode`` with the torch reference backend swapped in, eagerly (the indexer's
    key width follows the context, as the eager engine's would)."""
    from deepinfer.kernels.registry import KernelSet
    from deepinfer.runtime.model.decode_rows import DecodeRows

    dev = pool.device
    ids, positions, slots, tables = (torch.from_numpy(a).to(dev) for a in inputs)
    rows = DecodeRows(pool, ids, positions, slots, tables, context)
    saved, model.kernels = model.kernels, KernelSet()
    try:
        _, first_s = bc.timed(lambda: model.forward_decode(rows))  # warm-up
        times = []
        for _ in range(iters if first_s * iters < budget_s else 1):
            times.append(bc.timed(lambda: model.forward_decode(rows))[1] * 1e3)
    finally:
        model.kernels = saved
    return {"step_ms": statistics.median(times), "runs": len(times), "first_ms": first_s * 1e3}


def kernel_profile(graphs, inputs, replays: int = 5) -> dict:
    """GPU time per kernel over ``replays`` replays, GPU-busy vs wall time per replay. Should
    the profiler not see the kernels inside graph replays, the same static-buffer forward runs
    eagerly under it instead (same kernels, launched one by one; ``mode`` says which)."""
    from torch.profiler import ProfilerActivity, profile

    bucket = graphs.bucket_for(len(inputs[0]))
    replay_ms(graphs, inputs, iters=1)  # also leaves the point's rows in the static buffers
    modes = {"graph replay": lambda: graphs.run(*inputs),
             "eager static forward": lambda: graphs.model.forward_decode(graphs.rows(bucket))}
    for mode in modes:
        activity = ProfilerActivity.CUDA if torch.cuda.is_available() else ProfilerActivity.CPU
        with profile(activities=[activity]) as prof:
            _, wall_s = bc.timed(lambda: [modes[mode]() for _ in range(replays)])  # noqa: B023
        ivs = bc.gpu_intervals(prof)
        if len(ivs) >= 10 * replays:  # a graph shows only its input copy when untraced
            break
    return {"mode": mode, "replays": replays, "wall_ms_per_replay": wall_s * 1e3 / replays,
            "gpu_busy_ms_per_replay": bc.busy_us(ivs) / 1e3 / replays,
            "kernels": [{**r, "us_per_replay": r["total_us"] / replays}
                        for r in bc.kernel_table(ivs, 25)]}


def capture_times(llm, graphs, num_plan_buckets: int) -> dict:
    """Start-up parts: weights in place, graph capture (per bucket), and the capture time the
    plan's full bucket list would take (the first warm-up compiles the kernels; every other
    bucket costs about the median warm-up + capture)."""
    out = {"weights_s": getattr(llm, "startup_s", {}).get("load"),
           "capture_s": graphs.capture_s if graphs else 0.0}
    warm, cap = getattr(graphs, "warmup_s", {}), getattr(graphs, "graph_s", {})
    if warm and cap:
        out["warmup_s_per_bucket"], out["graph_s_per_bucket"] = warm, cap
        first = max(warm)  # captured largest first: its warm-up compiled the kernels
        others = [v for b, v in warm.items() if b != first] or [warm[first]]
        per_bucket = statistics.median(others) + statistics.median(cap.values())
        out["full_plan_capture_estimate_s"] = (out["capture_s"] + per_bucket *
                                               max(0, num_plan_buckets - len(warm)))
    return out


# ---- the engine loop: host time and idle gaps ----------------------------------------------
def host_gap(llm, num_prompts: int, prompt_len: int, num_tokens: int, profile_gpu: bool) -> dict:
    from torch.profiler import ProfilerActivity, profile, record_function

    from deepinfer.runtime.engine_stats import EngineStats
    from deepinfer.runtime.sampling_params import SamplingParams

    g = torch.Generator().manual_seed(29)
    vocab = min(120000, llm.loaded.spec.vocab_size)
    prompts = [torch.randint(3, vocab, (prompt_len,), generator=g).tolist()
               for _ in range(num_prompts)]
    params = SamplingParams(temperature=0.0, max_tokens=num_tokens, ignore_eos=True)
    llm.generate(prompts[:4], params)  # warm-up
    llm.engine.stats = EngineStats()
    _, wall_s = bc.timed(lambda: llm.generate(prompts, params))
    st = llm.engine.stats
    res = {"prompts": num_prompts, "prompt_len": prompt_len, "output_tokens": num_tokens,
           "wall_s": wall_s, "steps": st.num_steps, "decode_steps": st.num_decode_steps,
           "host_ms_per_step": st.host_s / max(1, st.num_steps) * 1e3,
           "decode_step_ms_median": statistics.median(st.decode_step_ms or [0.0]),
           "output_tokens_per_s": st.summary()["output_tokens_per_s"]}
    if not profile_gpu:
        res["idle_gap"] = {"count": 0, "note": "no GPU timeline (CPU run or --no-profile)"}
        return res
    # Launch marks on the main thread (the profiler records only threads it started on). With
    # the pipeline, step t+1 is launched while step t still runs, so the GPU idle gap before
    # step t+1 is the idle time right before the first GPU activity after its launch mark.
    engine, graph_launch = llm.engine, []
    real_launch = engine.worker.launch

    def launch(inputs):
        graph_launch.append(inputs.graph_rows is not None)
        with record_function(LAUNCH_MARK):
            return real_launch(inputs)

    engine.worker.launch = launch
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            llm.generate(prompts, params)
    except Exception as err:  # noqa: BLE001 - keep the host figures if the profiler fails
        res["idle_gap"] = {"count": 0, "note": f"profiled run failed: {err!r}"[:300]}
        return res
    finally:
        del engine.worker.launch
    launches = bc.cpu_ranges(prof, LAUNCH_MARK)
    if len(launches) != len(graph_launch):
        res["idle_gap"] = {"count": 0, "note": f"{len(launches)} launch ranges in the trace "
                           f"for {len(graph_launch)} launches: not matched"}
        return res
    marks = [start for t, (start, _) in enumerate(launches)
             if t > 0 and graph_launch[t] and graph_launch[t - 1]]
    gaps = bc.idle_before_us(bc.gpu_intervals(prof), marks)
    res["idle_gap"] = {**bc.gap_summary(gaps), "note": "profiled run (profiler host overhead "
                       "included)", "gaps_us": [round(x, 2) for x in gaps]}
    res["runtime_calls"] = bc.runtime_calls(prof)
    res["runtime_calls_in_launch"] = bc.runtime_calls(prof, launches)
    return res


# ---- the run ---------------------------------------------------------------------------------
def run(args, root: Path, progress) -> dict:
    from deepinfer.artifacts.plan_dir import read_plan
    from deepinfer.runtime import LLM
    from deepinfer.runtime.decode_graphs import DecodeGraphs
    from deepinfer.runtime.sampling_params import SamplingParams

    cuda = torch.cuda.is_available()
    topology = bc.default_topology(args.topology)
    res = bc.header(topology)
    print("versions", res["versions"], "commit", res["commit"], flush=True)
    points = [(b, c) for c in args.contexts for b in args.batches]

    def blocks_needed(compiled: dict) -> int:
        bs = compiled["scheduler"]["block_size_tokens"]
        points_blocks = max(b * blocks_per_row(c, bs) for b, c in points)
        loop_blocks = args.gap_prompts * blocks_per_row(args.gap_prompt_len + args.gap_tokens,
                                                        bs)
        return max(points_blocks, loop_blocks) + 64

    compiled_buckets: list[int] = []

    def cap_blocks(compiled: dict) -> int:
        compiled_buckets.extend(compiled["graph_buckets"]["decode"])
        return blocks_needed(compiled)

    buckets = None if args.graph_buckets == "plan" else \
        sorted({*args.batches, args.gap_prompts, 8})  # 8: the warm-up batch of 4 prompts
    plan_dir = bc.make_plan_dir(root, topology, cap_blocks, decode_buckets=buckets)
    plan = read_plan(plan_dir)
    res["plan_id"], res["num_blocks"] = plan["plan_id"], plan["scheduler"]["num_blocks"]
    res["startup"] = {"triton_cache": bc.triton_cache_state(),
                      "graph_buckets": plan["graph_buckets"]["decode"],
                      "plan_graph_buckets": compiled_buckets}
    llm, load_s = bc.timed(lambda: LLM(plan_dir, log=lambda line: print(line, flush=True)))
    graphs = llm.engine.graphs
    first = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    _, first_s = bc.timed(lambda: llm.generate([list(range(3, 19))], first))
    res["startup"].update(load_s=load_s, first_token_s=load_s + first_s,
                          **capture_times(llm, graphs, len(compiled_buckets)))
    print(f"start-up {load_s:.1f} s (graph capture {res['startup']['capture_s']:.1f} s), "
          f"first token after {load_s + first_s:.1f} s", flush=True)
    progress(res)
    res["ceilings"] = bc.ceilings(plan)
    print(f"ceilings: {res['ceilings']}", flush=True)
    if graphs is None:  # CPU: the same static-buffer forward, run eagerly
        graphs = DecodeGraphs(llm.loaded.model, llm.engine.pool, llm.plan.decode_buckets,
                              llm.engine.max_model_len)
        graphs.capture()
        llm.engine.graphs = llm.engine.worker.graphs = graphs
    model, pool, spec = llm.loaded.model, llm.engine.pool, llm.loaded.spec
    fabricate_cache(pool, model, min(pool.num_state_slots, max(args.batches) + 1),
                    min(pool.num_blocks, blocks_needed(plan)))
    roofs = {(r["batch"], r["context"]): r for r in bc.roofline().rooflines(
        plan, points, [], res["ceilings"])["decode"]}
    res["decode"], res["skipped"], res["eager"], res["kernels"] = [], [], [], []
    inputs_of = {}
    for b, c in points:
        reason = why_not(graphs, b, c, llm.engine.max_model_len)
        if reason:
            res["skipped"].append({"batch": b, "context": c, "reason": reason})
            print(f"skip batch {b} @ {c}: {reason}", flush=True)
            continue
        inputs_of[b, c] = point_inputs(b, c, pool.block_size_tokens, spec.vocab_size)
        step_ms = replay_ms(graphs, inputs_of[b, c], args.iters)
        roof = roofs[b, c]["roofline_ms"]
        res["decode"].append({"batch": b, "context": c, "tokens_per_s": b / step_ms * 1e3,
                              "step_ms": step_ms, "roofline_ms": roof, "eta": roof / step_ms,
                              "bound": roofs[b, c]["bound"]})
        print(f"batch {b:4d} @ {c:6d}: {step_ms:8.3f} ms, roofline {roof:.3f} ms, "
              f"eta {roof / step_ms:.3f}", flush=True)
        progress(res)
    if cuda and not args.no_profile:
        for b, c in parse_pairs(args.profile_points):
            if (b, c) in inputs_of:
                try:
                    k = kernel_profile(graphs, inputs_of[b, c])
                except Exception as err:  # noqa: BLE001 - a profiler failure loses one section
                    k = {"error": repr(err)[:300]}
                    print(f"kernel profile at batch {b} @ {c} failed: {err!r}", flush=True)
                res["kernels"].append({"batch": b, "context": c, **k})
                progress(res)
    res["host_gap"] = host_gap(llm, args.gap_prompts, args.gap_prompt_len, args.gap_tokens,
                               cuda and not args.no_profile)
    progress(res)
    ours = {(d["batch"], d["context"]): d["step_ms"] for d in res["decode"]}
    for b, c in ([] if args.no_eager else parse_pairs(args.eager_points)):
        if (b, c) not in inputs_of:
            continue
        try:
            e = eager_ms(model, pool, inputs_of[b, c], c, iters=3)
        except Exception as err:  # noqa: BLE001 - out of memory, or the reference refusing
            e = {"error": repr(err)[:300]}
        e.update(batch=b, context=c)
        if "step_ms" in e:
            e["speedup"] = e["step_ms"] / ours[b, c]
        res["eager"].append(e)
        print(f"eager reference batch {b} @ {c}: {e}", flush=True)
        progress(res)
    llm.engine.worker.close()
    return res


def parse_pairs(text: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in item.split("x")) for item in text.split(",") if item]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=parse_ints, default=None,
                    help="default 1,8,32,64,128,256 (CPU: 1,8,16)")
    ap.add_argument("--contexts", type=parse_ints, default=None,
                    help="default 4096,32768 (CPU: 256,1024)")
    ap.add_argument("--topology", default=None, help="default: the slice plan (CPU: tiny-cpu)")
    ap.add_argument("--out", type=Path, action="append", default=None,
                    help="results folder (repeatable); default bench/results")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--graph-buckets", choices=["bench", "plan"], default="bench",
                    help="capture only the benchmarked batch sizes (default; start-up reports "
                         "the full plan's capture as an estimate) or every plan bucket")
    ap.add_argument("--no-eager", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--eager-points", default=None,
                    help="default 1x4096,64x4096 (CPU: 1x256,16x256)")
    ap.add_argument("--profile-points", default="64x4096,256x32768")
    ap.add_argument("--gap-prompts", type=int, default=None, help="default 64 (CPU: 16)")
    ap.add_argument("--gap-prompt-len", type=int, default=None, help="default 128 (CPU: 32)")
    ap.add_argument("--gap-tokens", type=int, default=None, help="default 64 (CPU: 16)")
    ap.add_argument("--report", type=Path, default=None,
                    help="only print the tables of a (partial) results JSON")
    kernel_overrides.add_arguments(ap)
    args = ap.parse_args()
    kernel_overrides.apply_args(args)
    if args.report is not None:
        report(json.loads(args.report.read_text()))
        return 0
    for name, gpu, cpu in DEFAULTS:
        if getattr(args, name) is None:
            value = gpu if torch.cuda.is_available() else cpu
            setattr(args, name, parse_ints(value) if name in ("batches", "contexts") else value)
    res = bc.run_with_partials("decode", args.out,
                               lambda root, progress: run(args, root, progress))
    report(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
