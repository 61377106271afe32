"""Chunked prefill at other chunk sizes: the same long prompts through engines whose plans differ
only in the prefill chunk (and the step's token budget, at least one chunk), over one loaded
model. Chunked prefill against one-shot on the real kernels: greedy tokens and their logprobs
must agree across chunk sizes (the smallest chunk is the baseline); and the prefill time of a
lone prompt per chunk size (what the plan's ``prefill_chunk_size`` is chosen by). A chunk size
may repeat (each run gets an engine of its own): the baseline repeated tells run-to-run
differences from chunking ones.

    TRITON_INTERPRET=0 python bench/chunk_check.py [--prompt-len 16384] [--prompts 2]
        [--chunks 4096,8192,16384] [--tokens 4] [--out DIR]

On a CPU (the tiny plan) it runs the same comparison at small sizes: ``--prompt-len 96
--chunks 32,64,128``. Per chunk size: an engine (eager, no CUDA graphs), one warm-up prompt,
then ``--prompts`` prompts greedy for ``--tokens`` tokens with the top-2 logprobs (one
``generate``), and ``--repeats`` lone prompts up to their first token (the median is the
prefill time). A token differs from the baseline's either by a real error or by a near-tie: the
table gives the first divergence's baseline margin (top-1 minus top-2 logprob) and the largest
|logprob difference| of the tokens before it. Prints the table last; writes
``<date>-<gpu>-chunk_check.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402
from prefill import make_prompt  # noqa: E402

DEFAULTS = {"prompt_len": (16384, 96), "chunks": ("4096,8192,16384", "32,64,128")}


def parse_chunks(text: str, ap: argparse.ArgumentParser, count: int | None = None) -> list[int]:
    """``--chunks`` "A,B,...": positive sizes, at least two (exactly ``count`` if given); a
    malformed value exits naming the flag."""
    try:
        chunks = [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        chunks = []
    if len(chunks) < 2 or (count is not None and len(chunks) != count) or min(chunks) < 1:
        ap.error(f"--chunks: expected {count or 'two or more'} positive sizes, got {text!r}")
    return chunks


def chunk_plan(plan, chunk: int):
    """``plan`` (a RuntimePlan) with prefill chunks of ``chunk`` tokens and a step budget of at
    least one chunk."""
    p = copy.deepcopy(plan.plan)
    s = p["scheduler"]
    s["prefill_chunk_size_tokens"] = chunk
    s["max_num_batched_tokens"] = max(s["max_num_batched_tokens"], chunk)
    return dataclasses.replace(plan, plan=p)


def run_chunk(llm, chunk: int, prompts: list[list[int]], tokens: int, repeats: int) -> dict:
    """One engine at ``chunk``: the prompts' greedy tokens with top-2 logprobs, and the median
    time of ``repeats`` lone prompts to their first token."""
    from deepinfer.runtime.engine import Engine
    from deepinfer.runtime.sampling_params import SamplingParams

    base = llm.engine
    llm.engine = Engine(chunk_plan(llm.plan, chunk), llm.loaded, cuda_graphs=False)
    try:
        length, vocab = len(prompts[0]), llm.loaded.spec.vocab_size
        first = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
        llm.generate([make_prompt(length, vocab, 70)], first)  # warm-up
        params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True, logprobs=2)
        outs = llm.generate(prompts, params)
        times = [bc.timed(lambda i=i: llm.generate([make_prompt(length, vocab, 80 + i)],
                                                   first))[1] for i in range(repeats)]
        steps = llm.engine.stats.num_prefill_steps
    finally:
        llm.engine.worker.close()
        llm.engine = base
    return {"chunk": chunk, "prefill_ms": statistics.median(times) * 1e3,
            "prefill_steps": steps,
            "tokens": [o.token_ids for o in outs],
            "logprobs": [[lp.logprob for lp in o.logprobs] for o in outs],
            "margins": [[lp.top[0][1] - lp.top[1][1] for lp in o.logprobs] for o in outs]}


def compare(base: dict, other: dict) -> dict:
    """``other``'s tokens against ``base``'s: identical sequences; per prompt the first
    divergence, the baseline's margin there, and the largest |logprob difference| before it."""
    rows = []
    for i, (a, b) in enumerate(zip(base["tokens"], other["tokens"], strict=True)):
        n = next((j for j, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
        dlp = max((abs(x - y) for x, y in zip(base["logprobs"][i][:n], other["logprobs"][i][:n],
                                              strict=True)), default=0.0)
        rows.append({"prompt": i, "first_divergence": None if n == len(a) else n,
                     "margin_there": None if n == len(a) else base["margins"][i][n],
                     "max_dlogprob_before": dlp})
    return {"chunk": other["chunk"], "identical": sum(r["first_divergence"] is None
                                                     for r in rows), "prompts": rows}


def run(args, root: Path, progress) -> dict:
    from deepinfer.runtime import LLM

    topology = bc.default_topology(args.topology)
    res = bc.header(topology)
    print("versions", res["versions"], "commit", res["commit"], flush=True)

    def blocks(compiled: dict) -> int:  # every prompt resident at once, with its outputs
        per = (args.prompt_len + args.tokens) // compiled["scheduler"]["block_size_tokens"] + 2
        return per * (args.prompts + 1) + 64

    plan_dir = bc.make_plan_dir(root, topology, blocks)
    llm, res["load_s"] = bc.timed(lambda: LLM(plan_dir, cuda_graphs=False))
    res["plan_chunk"] = llm.plan.scheduler["prefill_chunk_size_tokens"]
    vocab = llm.loaded.spec.vocab_size
    prompts = [make_prompt(args.prompt_len, vocab, 50 + i) for i in range(args.prompts)]
    res.update(prompt_len=args.prompt_len, prompts=args.prompts, tokens=args.tokens, runs=[])
    for chunk in args.chunks:
        r = run_chunk(llm, chunk, prompts, args.tokens, args.repeats)
        res["runs"].append(r)
        print(f"chunk {chunk}: prefill {r['prefill_ms']:.1f} ms", flush=True)
        progress(res)
    res["agreement"] = [compare(res["runs"][0], r) for r in res["runs"][1:]]
    llm.engine.worker.close()
    return res


def report(res: dict) -> None:
    base = res["runs"][0]["chunk"]
    print(f"\n## chunked prefill — {res['gpu']}, commit {res['commit'][:10]}, {res['date']}")
    print(f"{res['prompts']} prompts of {res['prompt_len']} tokens, greedy {res['tokens']} "
          f"tokens; baseline chunk {base}\n")
    print("| chunk | prefill ms (lone prompt) | tokens/s | identical to the baseline | "
          "first divergences (step, baseline margin) | max |dlogprob| before |")
    print("|---:|---:|---:|---:|---|---:|")
    for r, a in zip(res["runs"], [None, *res.get("agreement", [])], strict=False):
        tok_s = res["prompt_len"] / r["prefill_ms"] * 1e3
        if a is None:
            print(f"| {r['chunk']} | {r['prefill_ms']:.1f} | {tok_s:,.0f} | baseline | | |")
            continue
        div = ", ".join(f"({p['first_divergence']}, {p['margin_there']:.3g})"
                        for p in a["prompts"] if p["first_divergence"] is not None)
        dlp = max(p["max_dlogprob_before"] for p in a["prompts"])
        print(f"| {r['chunk']} | {r['prefill_ms']:.1f} | {tok_s:,.0f} | "
              f"{a['identical']}/{res['prompts']} | {div or '-'} | {dlp:.3g} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt-len", type=int, default=None, help="default 16384 (CPU: 96)")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--chunks", default=None, help="default 4096,8192,16384 (CPU: 32,64,128); "
                    "the first is the baseline")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--topology", default=None, help="default: the slice plan (CPU: tiny-cpu)")
    ap.add_argument("--out", type=Path, action="append", default=None,
                    help="results folder (repeatable); default bench/results")
    args = ap.parse_args()
    cpu = not torch.cuda.is_available()
    args.prompt_len = args.prompt_len or DEFAULTS["prompt_len"][cpu]
    args.chunks = parse_chunks(args.chunks or DEFAULTS["chunks"][cpu], ap)
    if min(args.prompt_len, args.prompts, args.tokens, args.repeats) < 1:
        ap.error("--prompt-len, --prompts, --tokens and --repeats must be at least 1")
    res = bc.run_with_partials("chunk_check", args.out,
                               lambda root, progress: run(args, root, progress))
    report(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
