"""A/B of kernel overrides on a lone prompt's prefill in one process: the model loads once,
the variants run interleaved (variant 1, 2, ..., then again, ``--rounds`` times), each the
median of ``--repeats`` prefills, and one fixed prompt's first two greedy tokens with their
top-2 logprobs compared across the variants (the overrides under test keep the bits).

    python bench/prefill_ab.py --prompt-len 4096 \\
        --variant "quarters=--w4a16-prefill-parts 4" \\
        --variant "eighths=--w4a16-prefill-parts 8"

Why: a device round's A/B through ``prefill.py`` pays a model load (~11 s on the slice plan)
and a cold start per run; the overrides ``kernel_overrides.py`` sets are module constants read
at each call, so they switch between prefills of one loaded engine. Every variant must name
the same flags (each variant sets all of them: nothing carries over from the one before).
Each variant's first prefill (its kernels' compile) is a warm-up, not timed.

Prints a table (variant, round, ms, tokens/s, η against the prefill roofline) and the
per-variant medians; writes ``<date>-<gpu>-prefill_ab.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc  # noqa: E402
import kernel_overrides  # noqa: E402
import prefill  # noqa: E402


def parse_variants(texts: list[str]) -> list[tuple[str, list[str], argparse.Namespace]]:
    """``NAME=FLAGS`` -> (name, flags, the overrides' namespace); SystemExit naming the bad
    variant (no '=', an unknown flag, a different flag set than the first variant's)."""
    ap = argparse.ArgumentParser(prog="--variant", add_help=False, exit_on_error=False)
    kernel_overrides.add_arguments(ap)
    out, first = [], None
    for text in texts:
        name, sep, flags = text.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"prefill_ab: --variant {text!r}: expected NAME=FLAGS")
        argv = shlex.split(flags)
        try:
            ns, extra = ap.parse_known_args(argv)
        except argparse.ArgumentError as e:
            raise SystemExit(f"prefill_ab: --variant {name}: {e}") from None
        if extra:
            raise SystemExit(f"prefill_ab: --variant {name}: not a kernel_overrides.py flag: "
                             f"{' '.join(extra)}")
        named = {a.split("=")[0] for a in argv if a.startswith("--")}
        if first is None:
            first = named
        elif named != first:
            raise SystemExit(f"prefill_ab: --variant {name} names {sorted(named)}, the first "
                             f"variant {sorted(first)}: every variant must set the same flags")
        out.append((name.strip(), argv, ns))
    if len(out) < 2:
        raise SystemExit("prefill_ab: give at least two --variant NAME=FLAGS")
    if len({n for n, _, _ in out}) != len(out):
        raise SystemExit("prefill_ab: variant names must differ")
    return out


def run(args, root: Path, progress) -> dict:
    from deepinfer.artifacts.plan_dir import read_plan
    from deepinfer.runtime import LLM

    variants = args.variants
    topology = bc.default_topology(args.topology)
    res = bc.header(topology)
    print("versions", res["versions"], "commit", res["commit"], flush=True)
    plan_dir = bc.make_plan_dir(
        root, topology, lambda c: args.prompt_len // c["scheduler"]["block_size_tokens"] + 64)
    plan = read_plan(plan_dir)
    llm, res["load_s"] = bc.timed(lambda: LLM(plan_dir, cuda_graphs=False))
    res["ceilings"] = bc.ceilings(plan)
    (roof,) = bc.roofline().rooflines(plan, [], [args.prompt_len], res["ceilings"])["prefill"]
    res["roofline_ms"] = roof_ms = roof["prompt_roofline_ms"]
    vocab = llm.loaded.spec.vocab_size
    if args.prompt_len + 1 > llm.max_model_len:
        raise SystemExit(f"prefill_ab: --prompt-len {args.prompt_len} exceeds the plan's "
                         f"max_model_len {llm.max_model_len}")
    check = prefill.make_prompt(args.prompt_len, vocab, 7)

    def check_bits() -> list:
        """The fixed prompt's first two greedy tokens with their top-2 logprobs (values)."""
        from deepinfer.runtime.sampling_params import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True, logprobs=2)
        (out,) = llm.generate([check], params)
        return [(lp.top[0], lp.top[1]) for lp in out.logprobs]

    res["variants"] = [{"name": n, "flags": " ".join(f)} for n, f, _ in variants]
    res["runs"], tokens, warm = [], {}, set()
    print(f"load {res['load_s']:.1f} s; roofline {roof_ms:.2f} ms", flush=True)
    print("| variant | round | ms | tokens/s | η |\n|---|---:|---:|---:|---:|", flush=True)
    for rnd in range(1, args.rounds + 1):
        for name, _, ns in variants:
            kernel_overrides.apply_args(ns)
            if name not in warm:  # its kernels compiled, and the bits of the fixed prompt
                tokens[name] = check_bits()
                warm.add(name)
            times = [prefill.prefill_s(llm, prefill.make_prompt(args.prompt_len, vocab,
                                                                100 * rnd + r))
                     for r in range(args.repeats)]
            ms = statistics.median(times) * 1e3
            res["runs"].append({"variant": name, "round": rnd, "ms": ms,
                                "times_ms": [t * 1e3 for t in times]})
            print(f"| {name} | {rnd} | {ms:.1f} | {args.prompt_len / ms * 1e3:,.0f} | "
                  f"{roof_ms / ms:.3f} |", flush=True)
            progress(res)
    res["medians_ms"] = {n: statistics.median(r["ms"] for r in res["runs"] if r["variant"] == n)
                         for n, _, _ in variants}
    base = variants[0][0]
    res["same_tokens"] = all(tokens[n] == tokens[base] for n in tokens)
    res["check_tokens"] = tokens  # per variant: [(token, logprob) of the top 2] per step
    for n, ms in res["medians_ms"].items():
        print(f"{n}: {ms:.1f} ms median over {args.rounds} rounds "
              f"({ms / res['medians_ms'][base] - 1:+.1%} against {base})", flush=True)
    print("the fixed prompt's two greedy tokens and top-2 logprobs equal across variants: "
          f"{res['same_tokens']}", flush=True)
    if not res["same_tokens"]:
        for n, top in tokens.items():
            print(f"  {n}: " + "; ".join(" ".join(f"{t}:{lp:.6f}" for t, lp in step)
                                         for step in top), flush=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt-len", type=int, default=None, help="default 4096 (CPU: 256)")
    ap.add_argument("--topology", default=None, help="default: the slice plan (CPU: tiny-cpu)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                    help="kernel_overrides.py flags of one variant (repeat: two or more)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, action="append", default=None,
                    help="results folder (repeatable); default bench/results")
    args = ap.parse_args()
    if args.rounds < 1 or args.repeats < 1:
        ap.error(f"--rounds {args.rounds} / --repeats {args.repeats}: expected >= 1")
    if args.prompt_len is None:
        import torch

        args.prompt_len = 4096 if torch.cuda.is_available() else 256
    args.variants = parse_variants(args.variant)  # bad variants exit before anything loads
    bc.run_with_partials("prefill_ab", args.out,
                         lambda root, progress: run(args, root, progress))
    return 0


if __name__ == "__main__":
    sys.exit(main())
