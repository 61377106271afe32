"""The v41-flash-slice-h200 plan on one H200: 64 prompts with CUDA graphs vs the reference backend.

    TRITON_INTERPRET=0 python bench/h200_slice_check.py [--prompts 64] [--tokens 16] [--out DIR]

  Step 1  Plans. ``artifacts/topologies/v41-flash-slice-h200.yaml`` (real layer dimensions, 384
          MXFP4 experts, synthetic weights generated on the GPU) compiled once; two plan
          directories derived from it: ``triton`` (as compiled) and ``gpu-ref`` (every op
          ``reference``). Both cap ``num_blocks`` at NUM_BLOCKS (the batch needs far fewer), so
          they schedule identically and a second engine fits beside the first.
  Step 2  ``triton``: start-up (plan load, weights generated on the GPU, CUDA-graph capture of
          every decode bucket) and time to the first token of a short request; the batch of N
          prompts of 32..640 random ids (seeded), greedy, T tokens, logprobs=2 (top-1 minus
          top-2 = the logit margin), with graphs; the same batch eagerly (a second engine over
          the same model, ``cuda_graphs=False``): graphs and eager must agree token for token;
          the Triton logits along its own sequences of the K shortest prompts (the reference
          is slow on the GPU). The model is freed (one slice model fits at a time).
  Step 3  ``gpu-ref``: its logits along the Triton sequences of the K shortest prompts (up to
          the first divergence both read the same context, so their argmax is the reference's
          greedy token there); its own greedy decode of the shortest few (``--ref-generate``)
          must take the same tokens (a cross-check of the forced path); then, as a
          sensitivity control, the same logits with the reference's embedding table moved by
          about one bf16 rounding: the logit error an input error of a kernel's own size
          grows into in this (synthetic, chaotic) model.
  Step 4  Compare per request: tokens equal, or the first divergence with the reference's
          margin there and the measured max |logit_triton - logit_ref| there; a divergence is
          explained when the margin is at most twice that error. The report sets Triton's
          max |dlogit| beside the perturbed reference's.

Prints versions first and the tables last; with ``--out`` writes ``slice_check.json``.
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_common import slice_topology, sync, timed, versions  # noqa: E402

TOPOLOGY = REPO / "artifacts" / "topologies" / "v41-flash-slice-h200.yaml"
NUM_BLOCKS = 4096


def _model_check():
    """bench/h200_model_check.py (versions, forced logits, margins), loaded by path."""
    spec = importlib.util.spec_from_file_location("h200_model_check",
                                                  REPO / "bench" / "h200_model_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["h200_model_check"] = module
    spec.loader.exec_module(module)
    return module


mc = _model_check()


def make_plans(root: Path, topology: str | Path = TOPOLOGY) -> dict[str, Path]:
    from deepinfer.artifacts.plan_dir import write_plan
    from deepinfer.planner.compile import compile_plan
    from deepinfer.planner.report import render_report
    from deepinfer.planner.topology_schema import load_topology

    compiled = compile_plan(load_topology(str(topology)))
    dirs = {}
    for name in ("triton", "gpu-ref"):
        plan = copy.deepcopy(compiled)
        for section in ("scheduler", "cache"):
            plan[section]["num_blocks"] = min(plan[section]["num_blocks"], NUM_BLOCKS)
        if name == "gpu-ref":
            plan["kernels"]["backend_by_op"] = dict.fromkeys(plan["kernels"]["backend_by_op"],
                                                             "reference")
        dirs[name] = write_plan(root / name, plan, render_report(compiled))
    return dirs


def make_prompts(n: int, vocab_size: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(17)
    lengths = torch.randint(32, 641, (n,), generator=g).tolist()
    return [torch.randint(3, min(120000, vocab_size), (k,), generator=g).tolist()
            for k in lengths]


def release_device_memory() -> None:
    """After the caller dropped its last reference to a model (``del``: a callee cannot)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        print(f"device memory in use after a release: {torch.cuda.memory_allocated() / 2**30:.1f}"
              " GiB", flush=True)


def agreement(outs_a, outs_b) -> dict:
    """Token agreement of two runs of the same prompts (greedy, logprobs=2): identical count;
    per divergent request the first divergence and the two runs' top-1 minus top-2 margins
    there; the largest |top-1 logprob difference| before any divergence (0 when the runs
    compute bit-identical logits)."""
    rows, drift = [], 0.0
    for i, (a, b) in enumerate(zip(outs_a, outs_b, strict=True)):
        pairs = list(zip(a.token_ids, b.token_ids, strict=True))
        pos = next((p for p, (x, y) in enumerate(pairs) if x != y), len(pairs))
        for p in range(pos):
            drift = max(drift, abs(a.logprobs[p].top[0][1] - b.logprobs[p].top[0][1]))
        if pos < len(pairs):
            rows.append({"index": i, "first_divergence": pos, "margin_a": mc.margin(a, pos),
                         "margin_b": mc.margin(b, pos)})
    return {"identical": len(outs_a) - len(rows), "max_top1_logprob_drift": drift,
            "divergent": rows}


def forced_all(llm, prompts: list[list[int]], outs) -> list[torch.Tensor]:
    """Each request's (T, vocab) logits along the given outputs' sequences, on the host."""
    return mc.forced_logits_batched(llm, prompts, [o.token_ids for o in outs])


def run(root: Path, num_prompts: int, num_tokens: int, num_ref: int, out: Path | None,
        topology: str | Path = TOPOLOGY, num_ref_generate: int = 4) -> dict:
    from deepinfer.runtime import LLM
    from deepinfer.runtime.engine import Engine
    from deepinfer.runtime.sampling_params import SamplingParams

    res: dict = {"versions": versions()}
    print("versions", json.dumps(res["versions"]), flush=True)

    def progress() -> None:  # partial results survive a timeout
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / "slice_check.partial.json").write_text(json.dumps(res, indent=1))

    dirs = make_plans(root, topology)

    # Step 2: Triton with CUDA graphs
    t0 = time.perf_counter()
    llm = LLM(dirs["triton"], log=lambda line: print(line, flush=True))
    sync()
    res["startup_s"] = time.perf_counter() - t0
    res["graph_capture_s"] = llm.engine.graphs.capture_s if llm.engine.graphs else 0.0
    prompts = make_prompts(num_prompts, llm.loaded.spec.vocab_size)
    res["prompt_tokens"] = sum(map(len, prompts))
    first = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    _, first_s = timed(lambda: llm.generate([prompts[0][:16]], first))
    res["first_token_s"] = res["startup_s"] + first_s
    print(f"triton start-up {res['startup_s']:.1f} s (graph capture "
          f"{res['graph_capture_s']:.1f} s), first token after {res['first_token_s']:.1f} s",
          flush=True)
    res["fallbacks"] = dict(getattr(llm.loaded.model.kernels, "fallbacks", {}))
    res["triton_ops"] = sorted(op for op, b in llm.plan.kernels.items() if b == "triton")
    progress()
    outs, res["graph_generate_s"] = timed(lambda: mc.generate(llm, prompts, num_tokens))
    res["graph_stats"] = llm.engine.stats.summary()
    print(f"graphs: generate {res['graph_generate_s']:.1f} s", flush=True)
    progress()
    graph_engine = llm.engine
    llm.engine = Engine(llm.plan, llm.loaded, cuda_graphs=False)
    eager_outs, res["eager_generate_s"] = timed(lambda: mc.generate(llm, prompts, num_tokens))
    res["eager_stats"] = llm.engine.stats.summary()
    llm.engine.worker.close()
    llm.engine = Engine(llm.plan, llm.loaded, cuda_graphs=False)  # run-to-run determinism
    eager2_outs = mc.generate(llm, prompts, num_tokens)
    llm.engine.worker.close()
    # the graphs' static buffers and widths without the graphs: DecodeGraphs.run's CPU branch
    # (forward_decode over the static rows, eagerly) tells a capture problem from a shape one
    graphs = graph_engine.graphs  # None on a CPU plan: then the same eager run
    if graphs is not None:
        graphs.replay = False
    llm.engine = graph_engine
    static_outs = mc.generate(llm, prompts, num_tokens)
    if graphs is not None:
        graphs.replay = graph_engine.device.type == "cuda"
    res["static_vs_eager"] = agreement(static_outs, eager_outs)
    res["graph_vs_static"] = agreement(outs, static_outs)
    res["graph_vs_eager"] = agreement(outs, eager_outs)
    res["eager_vs_eager"] = agreement(eager2_outs, eager_outs)
    res["graph_vs_eager_identical"] = res["graph_vs_eager"]["identical"]
    print(f"eager: generate {res['eager_generate_s']:.1f} s; graphs == eager for "
          f"{res['graph_vs_eager_identical']}/{num_prompts}; eager == eager for "
          f"{res['eager_vs_eager']['identical']}/{num_prompts}", flush=True)
    progress()
    llm.engine = graph_engine
    # the reference checks the shortest prompts (its GPU run is slow); logits along the Triton
    # sequences: up to the first divergence both sides read the same context
    subset = sorted(range(num_prompts), key=lambda i: len(prompts[i]))[:num_ref]
    tri_logits = forced_all(llm, [prompts[i] for i in subset], [outs[i] for i in subset])
    # one slice model fits at a time: every name that reaches the Triton model goes
    llm.engine.worker.close()
    llm = graph_engine = graphs = None  # (not del: closures above captured the names)
    release_device_memory()

    # Step 3: the reference backend. Its greedy tokens along Triton's sequences are the argmax
    # of its forced logits (same context up to the first divergence); a generate() run on the
    # shortest few cross-checks that against its own incremental decode.
    ref, res["ref_load_s"] = timed(lambda: LLM(dirs["gpu-ref"], cuda_graphs=False))
    ref_prompts = [prompts[i] for i in subset]
    gen_prompts = ref_prompts[:num_ref_generate]
    ref_outs, res["ref_generate_s"] = timed(lambda: mc.generate(ref, gen_prompts, num_tokens))
    print(f"gpu-ref: load {res['ref_load_s']:.1f} s, generate {res['ref_generate_s']:.1f} s "
          f"({len(gen_prompts)} prompts)", flush=True)
    ref.engine.worker.close()  # its KV pool is not needed by the forced forwards
    ref.engine = None
    release_device_memory()
    ref_logits, res["ref_forced_s"] = timed(
        lambda: forced_all(ref, ref_prompts, [outs[i] for i in subset]))
    # sensitivity control: the reference itself, its embedding table moved by about one bf16
    # rounding (relative noise 2^-8, re-rounded): how far logits move from an input error of a
    # kernel's own size (a chaotic synthetic model amplifies any rounding difference)
    emb = ref.loaded.model.embed.weight
    gen = torch.Generator(device=emb.device).manual_seed(0)
    noise = torch.rand(emb.shape, generator=gen, device=emb.device) * 2 - 1
    emb.copy_((emb.float() * (1 + noise * 2.0 ** -8)).to(emb.dtype))
    del noise
    pert_logits = forced_all(ref, ref_prompts, [outs[i] for i in subset])
    print(f"gpu-ref: forced logits of {len(subset)} prompts in {res['ref_forced_s']:.1f} s",
          flush=True)
    ref = None
    release_device_memory()

    # Step 4
    rows = []
    for j, i in enumerate(subset):
        a = outs[i]
        err = (tri_logits[j] - ref_logits[j]).abs().amax(-1)
        ref_greedy = ref_logits[j].argmax(-1).tolist()
        row = {"index": i, "prompt_len": len(prompts[i]), "match": a.token_ids == ref_greedy}
        pos = len(a.token_ids) - 1
        if not row["match"]:
            pos = next(p for p, (x, y) in enumerate(zip(a.token_ids, ref_greedy, strict=True))
                       if x != y)
            top2 = ref_logits[j][pos].topk(2).values
            row.update(first_divergence=pos, logit_err=float(err[pos]),
                       margin_ref=float(top2[0] - top2[1]), margin_triton=mc.margin(a, pos))
            row["explained"] = row["margin_ref"] <= 2 * row["logit_err"]
        if j < len(ref_outs):  # the reference's own decode takes the forced-logit path's tokens
            row["ref_generate_consistent"] = (ref_outs[j].token_ids[:pos + 1]
                                              == a.token_ids[:pos] + [ref_greedy[pos]])
        row["max_logit_err"] = float(err[:pos + 1].max())  # over the shared context only
        diff = tri_logits[j] - ref_logits[j]
        rel = diff.norm(dim=-1) / ref_logits[j].norm(dim=-1)  # (T,) ||d|| / ||ref|| per row
        row["max_rel_logit_err"] = float(rel[:pos + 1].max())
        row["ref_logit_std"] = float(ref_logits[j][pos].std())
        pert = (pert_logits[j] - ref_logits[j]).abs().amax(-1)
        row["max_logit_err_perturbed_ref"] = float(pert[:pos + 1].max())
        rows.append(row)
    res["requests"] = rows
    res["num_match"] = sum(r["match"] for r in rows)
    res["num_unexplained"] = sum(1 for r in rows if not r["match"] and not r["explained"])
    res["ref_generate_consistent"] = sum(r.get("ref_generate_consistent", False) for r in rows)
    res["ref_generate_checked"] = len(ref_outs)
    ratios = sorted(r["max_logit_err"] / max(r["max_logit_err_perturbed_ref"], 1e-30)
                    for r in rows)
    res["median_err_ratio_triton_vs_perturbed_ref"] = ratios[len(ratios) // 2]
    progress()
    return res


def report(res: dict, num_prompts: int) -> None:
    print(f"\ntriton ops: {', '.join(res['triton_ops'])}")
    print(f"load-time fallbacks: {res['fallbacks'] or 'none'}")
    print("\n| req | len | match | first div | margin ref | margin tri | |dlogit| there | "
          "explained | max |dlogit| | perturbed ref |")
    for r in res["requests"]:
        cells = ["-"] * 4 if r["match"] else [
            str(r["first_divergence"]), f"{r['margin_ref']:.4g}", f"{r['margin_triton']:.4g}",
            f"{r['logit_err']:.3g}"]
        expl = "-" if r["match"] else ("yes" if r["explained"] else "NO")
        print(f"| {r['index']:3d} | {r['prompt_len']:4d} | {'yes' if r['match'] else 'no':5s} | "
              + " | ".join(f"{c:>10s}" for c in cells) + f" | {expl:9s} | "
              f"{r['max_logit_err']:10.3g} | {r['max_logit_err_perturbed_ref']:10.3g} | rel "
              f"{r['max_rel_logit_err']:.3g}, ref logit std {r['ref_logit_std']:.3g}")
    print(f"\ntriton (graphs) vs gpu-ref: {res['num_match']}/{len(res['requests'])} "
          "token-identical (the shortest prompts), "
          f"{res['num_unexplained']} unexplained divergences; max |dlogit| triton vs ref / "
          "perturbed ref vs ref (embedding moved ~1 bf16 rounding), median over requests: "
          f"{res['median_err_ratio_triton_vs_perturbed_ref']:.3g}")
    for key in ("graph_vs_eager", "eager_vs_eager", "static_vs_eager", "graph_vs_static"):
        a = res[key]
        firsts = sorted(r["first_divergence"] for r in a["divergent"])
        margins = sorted(min(r["margin_a"], r["margin_b"]) for r in a["divergent"])
        print(f"{key}: {a['identical']}/{num_prompts} token-identical, first divergences "
              f"{firsts[:16]}, smallest margins there {[f'{m:.3g}' for m in margins[:8]]}, "
              f"max top-1 logprob drift before divergence {a['max_top1_logprob_drift']:.3g}")
    print(f"start-up {res['startup_s']:.1f} s (capture {res['graph_capture_s']:.1f} s), "
          f"first token {res['first_token_s']:.1f} s")
    for key in ("graph", "eager"):
        s = res[f"{key}_stats"]
        print(f"{key:5s}: generate {res[f'{key}_generate_s']:.2f} s, decode steps "
              f"{s['decode_steps']}, out tok/s {s['output_tokens_per_s']:.1f}, "
              f"host {s['host_s']:.2f} s, forward {s['forward_s']:.2f} s")
    print(f"gpu-ref: load {res['ref_load_s']:.1f} s, generate {res['ref_generate_s']:.1f} s "
          f"({res['ref_generate_checked']} prompts: its tokens agree with its forced-logit argmax "
          f"on {res['ref_generate_consistent']}), forced logits {res['ref_forced_s']:.1f} s "
          f"({len(res['requests'])} prompts)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--ref-prompts", type=int, default=64,
                    help="how many (the shortest) prompts the reference backend also runs")
    ap.add_argument("--ref-generate", type=int, default=4,
                    help="how many of those the reference also decodes itself (a cross-check "
                    "of its forced logits; slow on the GPU)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--topology", default=str(TOPOLOGY))
    args = ap.parse_args()
    if not torch.cuda.is_available() and args.topology == str(TOPOLOGY):
        print("no CUDA device: nothing to check (a CPU smoke run: --topology builtin:tiny-cpu)",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        topology = args.topology
        if topology == str(TOPOLOGY) and torch.cuda.is_available():  # an H100: its device kind
            topology = slice_topology(torch.cuda.get_device_name(), Path(tmp))
        res = run(Path(tmp), args.prompts, args.tokens, args.ref_prompts, args.out,
                  topology, args.ref_generate)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "slice_check.json").write_text(json.dumps(res, indent=1))
    report(res, args.prompts)
    ok = res["num_unexplained"] == 0 and res["graph_vs_eager_identical"] == args.prompts
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
