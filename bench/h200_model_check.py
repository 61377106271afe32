"""The tiny V4.1 model through the engine on one GPU: Triton vs reference, GPU vs CPU, decode time.

    TRITON_INTERPRET=0 python bench/h200_model_check.py [--prompts 16] [--tokens 16] [--out DIR]

  Step 1  Plans. ``tests/gpu/tiny-h200.yaml`` is compiled once (before Triton registers anything,
          so the plan is what the planner alone decides); three plan directories are derived from
          it, differing only in what is compared: ``triton`` (as compiled: the planner's
          ``kernels.backend_by_op``), ``gpu-ref`` (every op ``reference``) and ``cpu-ref`` (every
          op ``reference``, ``hardware.device: cpu``). All three cap ``num_blocks`` at 1024, so
          they schedule identically (and the CPU pools stay small).
  Step 2  Each plan through ``LLM.generate``: N prompts of 3..60 random token ids (seeded),
          greedy, T tokens, ``logprobs=2`` (the raw top-2 log-probabilities: their difference is
          the top-1 minus top-2 logit margin).
  Step 3  Compare ``triton`` with ``gpu-ref`` (a) and ``gpu-ref`` with ``cpu-ref`` (b), per
          request: tokens equal, or the first divergence, the reference's margin there, and the
          measured logit error there: both models run the reference's own sequence (prompt +
          reference tokens) in one forward, and ``max |logit_a - logit_b|`` at that step bounds
          what the kernels' error can do. A divergence is *explained* when the reference's
          margin is at most twice that error (a flip of the top two needs their errors to differ
          by the margin).
  Step 4  (c) one decode step (N rows: batch build, forward, greedy sampling, token ids back
          to the host), median of 10 after 3 warm-ups, CUDA events and wall clock, per backend.

Prints ``versions`` first and the tables last; with ``--out`` also writes ``model_check.json``.
tests/gpu/test_model_gpu.py runs the same checks under pytest (marked ``gpu``).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_common import versions  # noqa: E402

TOPOLOGY = REPO / "tests" / "gpu" / "tiny-h200.yaml"
NUM_BLOCKS = 1024
BACKENDS = ("triton", "gpu-ref", "cpu-ref")


@dataclass
class RequestCompare:
    """One request of a comparison (a against b, b the reference side)."""

    index: int
    match: bool
    first_divergence: int | None = None  # output position of the first different token
    margin_b: float | None = None  # top-1 minus top-2 logit of b there
    margin_a: float | None = None
    logit_err: float | None = None  # max |logit_a - logit_b| there, on b's sequence
    explained: bool | None = None  # margin_b <= 2 * logit_err
    max_logit_err: float = 0.0  # over every output position, on b's sequence


@dataclass
class Compare:
    name: str
    rows: list[RequestCompare] = field(default_factory=list)

    @property
    def num_match(self) -> int:
        return sum(r.match for r in self.rows)

    @property
    def unexplained(self) -> list[RequestCompare]:
        return [r for r in self.rows if not r.match and not r.explained]


@dataclass
class CheckResult:
    versions: dict[str, str]
    triton_ops: list[str]
    fallbacks: dict[str, str]
    fallback_calls: dict[str, int]
    compares: list[Compare]
    decode_ms: dict[str, dict[str, float]]
    run_s: dict[str, float]


# ---- Step 1 --------------------------------------------------------------------------------------
def make_plans(root: Path) -> dict[str, Path]:
    from deepinfer.artifacts.plan_dir import write_plan
    from deepinfer.planner.compile import compile_plan
    from deepinfer.planner.report import render_report
    from deepinfer.planner.topology_schema import load_topology

    compiled = compile_plan(load_topology(str(TOPOLOGY)))
    dirs = {}
    for name in BACKENDS:
        plan = copy.deepcopy(compiled)
        for section in ("scheduler", "cache"):
            plan[section]["num_blocks"] = min(plan[section]["num_blocks"], NUM_BLOCKS)
        if name != "triton":
            plan["kernels"]["backend_by_op"] = dict.fromkeys(plan["kernels"]["backend_by_op"],
                                                             "reference")
        if name == "cpu-ref":
            plan["topology"]["hardware"]["device"] = "cpu"
        elif torch.cuda.is_available() and "h100" in torch.cuda.get_device_name().lower():
            # the same plan on an H100 (its memory_gib is the topology's own: only the loader's
            # device check reads the kind)
            plan["topology"]["hardware"]["device"] = "h100"
        dirs[name] = write_plan(root / name, plan, render_report(compiled))
    return dirs


# ---- Step 2 --------------------------------------------------------------------------------------
def make_prompts(num_prompts: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    lengths = torch.randint(3, 60, (num_prompts,), generator=g).tolist()
    return [torch.randint(3, 500, (n,), generator=g).tolist() for n in lengths]


def generate(llm, prompts: list[list[int]], num_tokens: int):
    from deepinfer.runtime.sampling_params import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=num_tokens, ignore_eos=True, logprobs=2)
    return llm.generate(prompts, params)


def margin(output, pos: int) -> float:
    top = output.logprobs[pos].top
    return float(top[0][1] - top[1][1])


# ---- Step 3 --------------------------------------------------------------------------------------
@torch.no_grad()
def forced_logits(llm, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """(len(tokens), vocab) fp32 on the CPU: the logits predicting each of ``tokens`` when the
    model reads ``prompt + tokens`` in one forward."""
    from deepinfer.runtime.model.batch import ForwardBatch
    from deepinfer.runtime.model.cache import SequenceCache

    model = llm.loaded.model
    cache = SequenceCache.empty(model.spec, model.device)
    seq = prompt + tokens[:-1]
    logits = model(ForwardBatch.build([seq], [cache], device=model.device), all_logits=True)
    return logits[len(prompt) - 1:].float().cpu()


def forced_logits_batched(llm, prompts: list[list[int]], token_lists: list[list[int]],
                          per_forward: int = 8) -> list[torch.Tensor]:
    """:func:`forced_logits` of many sequences, ``per_forward`` of them per batched forward (the
    reference backend's per-expert loop then runs once per batch, not once per sequence)."""
    from deepinfer.runtime.model.batch import ForwardBatch
    from deepinfer.runtime.model.cache import SequenceCache

    model = llm.loaded.model
    out: list[torch.Tensor] = []
    for lo in range(0, len(prompts), per_forward):
        seqs = [p + t[:-1] for p, t in zip(prompts[lo:lo + per_forward],
                                           token_lists[lo:lo + per_forward], strict=True)]
        caches = [SequenceCache.empty(model.spec, model.device) for _ in seqs]
        logits = model(ForwardBatch.build(seqs, caches, device=model.device), all_logits=True)
        first = 0
        for seq, prompt in zip(seqs, prompts[lo:lo + per_forward], strict=True):
            out.append(logits[first + len(prompt) - 1:first + len(seq)].float().cpu())
            first += len(seq)
    return out


def compare(name: str, llm_a, outs_a, llm_b, outs_b, prompts) -> Compare:
    result = Compare(name)
    for i, (a, b) in enumerate(zip(outs_a, outs_b, strict=True)):
        err = (forced_logits(llm_a, prompts[i], b.token_ids)
               - forced_logits(llm_b, prompts[i], b.token_ids)).abs().amax(-1)  # (T,)
        row = RequestCompare(i, a.token_ids == b.token_ids, max_logit_err=float(err.max()))
        if not row.match:
            pairs = zip(a.token_ids, b.token_ids, strict=True)
            pos = next(p for p, (x, y) in enumerate(pairs) if x != y)
            row.first_divergence, row.logit_err = pos, float(err[pos])
            row.margin_b, row.margin_a = margin(b, pos), margin(a, pos)
            row.explained = row.margin_b <= 2 * row.logit_err
        result.rows.append(row)
    return result


# ---- Step 4 --------------------------------------------------------------------------------------
@torch.no_grad()
def time_decode(llm, prompts: list[list[int]], warmup: int = 3, reps: int = 10
                ) -> dict[str, float]:
    from deepinfer.runtime.model.batch import ForwardBatch
    from deepinfer.runtime.model.cache import SequenceCache

    model, k = llm.loaded.model, llm.loaded.model.kernels
    dev = model.device
    caches = [SequenceCache.empty(model.spec, dev) for _ in prompts]
    logits = model(ForwardBatch.build(prompts, caches, device=dev), all_logits=False)
    tokens = logits.argmax(-1).tolist()
    n = len(prompts)
    zeros_f = torch.zeros(n, device=dev)
    zeros_i = torch.zeros(n, dtype=torch.int64, device=dev)
    ones_f = torch.ones(n, device=dev)
    event_ms, wall_ms = [], []
    for step in range(warmup + reps):
        if dev.type == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        batch = ForwardBatch.build([[t] for t in tokens], caches, device=dev)
        logits = model(batch, all_logits=False)
        ids = k.sample_tokens(logits, zeros_f, ones_f, zeros_i, zeros_f, zeros_i,
                              zeros_i + step)
        tokens = ids.tolist()
        if dev.type == "cuda":
            end.record()
            torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        if step >= warmup:
            wall_ms.append(wall)
            event_ms.append(start.elapsed_time(end) if dev.type == "cuda" else wall)
    return {"event_ms_median": statistics.median(event_ms), "wall_ms_median":
            statistics.median(wall_ms), "wall_ms_min": min(wall_ms), "wall_ms_max": max(wall_ms)}


# ---- driver --------------------------------------------------------------------------------------
def run_checks(root: Path, num_prompts: int = 16, num_tokens: int = 16) -> CheckResult:
    from deepinfer.runtime import LLM

    vers = versions()
    print("versions", json.dumps(vers), flush=True)
    dirs = make_plans(root)
    prompts = make_prompts(num_prompts)
    llms, outs, run_s = {}, {}, {}
    for name in ("gpu-ref", "cpu-ref", "triton"):  # triton last: it registers the kernels
        t0 = time.perf_counter()
        llms[name] = LLM(dirs[name])
        outs[name] = generate(llms[name], prompts, num_tokens)
        run_s[name] = time.perf_counter() - t0
        print(f"{name}: load + generate {run_s[name]:.1f} s", flush=True)
    tri = llms["triton"].loaded.model.kernels
    compares = [compare("(a) triton vs gpu-ref", llms["triton"], outs["triton"],
                        llms["gpu-ref"], outs["gpu-ref"], prompts),
                compare("(b) gpu-ref vs cpu-ref", llms["gpu-ref"], outs["gpu-ref"],
                        llms["cpu-ref"], outs["cpu-ref"], prompts)]
    decode = {name: time_decode(llms[name], prompts) for name in ("triton", "gpu-ref")}
    return CheckResult(
        versions=vers,
        triton_ops=sorted(op for op, b in llms["triton"].plan.kernels.items() if b == "triton"),
        fallbacks=dict(getattr(tri, "fallbacks", {})),
        fallback_calls=dict(llms["triton"].engine.stats.kernel_fallback_calls),
        compares=compares, decode_ms=decode, run_s=run_s)


def print_report(res: CheckResult) -> None:
    print(f"\ntriton ops (plan): {', '.join(res.triton_ops)}")
    print(f"load-time fallbacks to the reference: {res.fallbacks or 'none'}")
    print(f"fallback calls in the triton run: {res.fallback_calls or 'none'}")
    for cmp in res.compares:
        print(f"\n{cmp.name}: {cmp.num_match}/{len(cmp.rows)} requests token-identical, "
              f"{len(cmp.unexplained)} unexplained divergences")
        print("| req | match | first div | margin ref | margin other | |dlogit| there "
              "| explained | max |dlogit| |")
        for r in cmp.rows:
            cells = ["-"] * 4 if r.match else [
                str(r.first_divergence), f"{r.margin_b:.4g}", f"{r.margin_a:.4g}",
                f"{r.logit_err:.3g}"]
            explained = "-" if r.match else ("yes" if r.explained else "NO")
            print(f"| {r.index:3d} | {'yes' if r.match else 'no':5s} | "
                  + " | ".join(f"{c:>10s}" for c in cells)
                  + f" | {explained:9s} | {r.max_logit_err:10.3g} |")
    print("\n(c) one decode step, median of 10 (batch build, forward, greedy sampling, ids to "
          "the host)")
    print("| backend | CUDA events ms | wall ms | wall min | wall max |")
    for name, t in res.decode_ms.items():
        print(f"| {name:7s} | {t['event_ms_median']:14.2f} | {t['wall_ms_median']:7.2f} | "
              f"{t['wall_ms_min']:8.2f} | {t['wall_ms_max']:8.2f} |")
    print("\nload + generate s: " + ", ".join(f"{k} {v:.1f}" for k, v in res.run_s.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--out", type=Path, default=None, help="also write model_check.json here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("versions", json.dumps(versions()))
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        res = run_checks(Path(tmp), args.prompts, args.tokens)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "model_check.json").write_text(json.dumps(asdict(res), indent=1))
    print_report(res)
    return 1 if any(c.unexplained for c in res.compares) else 0


if __name__ == "__main__":
    sys.exit(main())
