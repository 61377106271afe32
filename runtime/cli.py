"""``deepinfer-run PLAN_DIR``: replay a compiled plan over a JSONL batch of prompts.

Formats of ``--input`` and ``--output`` lines: ``docs/formats.md``. Results are appended as
requests finish (fsynced per line), so a crash or Ctrl-C leaves a valid file holding every
finished request, and ``--resume`` skips the ids already there. Exit codes: 0 every request
succeeded, 3 some lines were rejected (each with its reason, in the output and on stderr),
2 unusable arguments or plan, 1 an internal error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.resources import files
from pathlib import Path

from deepinfer.artifacts.model_spec import ConfigError
from deepinfer.artifacts.plan_schema import PlanError
from deepinfer.runtime.launcher import is_rank_process, launch_ranks, plan_world_size
from deepinfer.runtime.progress import ProgressLine
from deepinfer.runtime.request_io import (
    PromptLimits,
    Rejection,
    ResultsFileError,
    ResultsWriter,
    read_finished_ids,
    read_requests,
    result_record,
)
from deepinfer.runtime.sampling_params import SamplingParams, SamplingParamsError
from deepinfer.runtime.tokenizer import TokenizerError
from deepinfer.runtime.weights import CheckpointError

USER_ERRORS = (PlanError, ConfigError, TokenizerError, CheckpointError, SamplingParamsError,
               ResultsFileError)
DEMO_PROMPTS = Path(str(files("deepinfer.artifacts") / "builtin" / "demo_prompts.jsonl"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="deepinfer-run",
                                description="Run a batch of prompts through a compiled plan.")
    p.add_argument("plan_dir", nargs="?", default="plan",
                   help="plan directory written by deepinfer-compile (default: plan)")
    p.add_argument("--input", help="requests, one JSON object per line (default: demo prompts)")
    p.add_argument("--output", help="results JSONL, appended as requests finish (default: stdout)")
    p.add_argument("--resume", action="store_true",
                   help="keep --output and skip the ids it already holds")
    p.add_argument("--max-tokens", type=int, help="default max_tokens of every request")
    p.add_argument("--temperature", type=float, help="default temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, help="default top_p")
    p.add_argument("--top-k", type=int, help="default top_k (-1 = off)")
    p.add_argument("--seed", type=int, default=0,
                   help="engine seed: requests without a seed use seed + line index")
    p.add_argument("--no-pipeline", action="store_true",
                   help="post-process each step after it instead of during the next one")
    p.add_argument("--no-cuda-graphs", action="store_true",
                   help="run decode steps eagerly instead of replaying the plan's CUDA graphs")
    p.add_argument("--stats", action="store_true", help="print engine statistics at the end")
    return p


def _default_params(args: argparse.Namespace) -> SamplingParams:
    given = {"max_tokens": args.max_tokens, "temperature": args.temperature,
             "top_p": args.top_p, "top_k": args.top_k}
    return SamplingParams.from_dict({k: v for k, v in given.items() if v is not None},
                                    source="command line")


def _prog() -> str:
    """``deepinfer-run``, or ``deepinfer-run (rank R)`` in one rank of a multi-rank plan."""
    return f"deepinfer-run (rank {os.environ['RANK']})" if is_rank_process() else "deepinfer-run"


def _fail(message: str) -> int:
    print(f"{_prog()}: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except Exception as err:  # an internal error: say so briefly, exit 1 (not a user mistake)
        print(f"{_prog()}: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.plan_dir.endswith((".yaml", ".yml")):
        return _fail(f"{args.plan_dir} is a topology, not a plan; run "
                     f"`deepinfer-compile {args.plan_dir} -o plan` first, then "
                     "`deepinfer-run plan`")
    if args.resume and not args.output:
        return _fail("--resume needs --output (the results file to continue)")
    input_path = Path(args.input) if args.input else DEMO_PROMPTS
    try:
        defaults = _default_params(args)
        lines = input_path.read_text(encoding="utf-8").splitlines()
        done_ids = read_finished_ids(args.output) if args.resume else set()
        if not is_rank_process():  # multi-rank plan: start its ranks (runtime/launcher.py)
            world_size = plan_world_size(args.plan_dir)
            if world_size > 1:
                return launch_ranks(sys.argv[1:] if argv is None else list(argv), world_size)
        from deepinfer.runtime.llm import LLM

        llm = LLM(args.plan_dir, pipeline=not args.no_pipeline, seed=args.seed,
                  cuda_graphs=not args.no_cuda_graphs)
    except USER_ERRORS as err:
        return _fail(str(err))
    except (OSError, UnicodeDecodeError) as err:
        return _fail(f"cannot read {input_path}: {err}")
    spec = llm.loaded.spec
    limits = PromptLimits(llm.tokenizer, spec.vocab_size, llm.max_model_len,
                          spec.image_token_id, input_path.parent, defaults)
    return _run(llm, read_requests(lines, limits, done_ids), args, str(input_path))


def _run(llm, items, args: argparse.Namespace, source: str) -> int:
    requests, rejections = [], []
    for item in items:
        (rejections if isinstance(item, Rejection) else requests).append(item)
    if llm.dist is not None and llm.dist.rank != 0:  # multi-rank: rank 0 writes every result
        return _run_other_rank(llm, requests)
    out = ResultsWriter(args.output, resume=args.resume) if args.output else _Stdout()
    progress = ProgressLine(len(requests))
    tokens = [0, 0]  # finished requests, output tokens

    def reject(r: Rejection) -> None:
        print(f"deepinfer-run: rejected {r.describe(source)}", file=sys.stderr)
        out.write_rejection(r)

    def finished(o) -> None:
        out.write_output(o)
        tokens[0] += 1
        tokens[1] += o.num_output_tokens
        progress.update(tokens[0], tokens[1])

    def engine_rejected(req, reason: str) -> None:
        rejections.append(Rejection(req.request_id, reason, req.index + 1))
        reject(rejections[-1])

    with out:
        for r in rejections:
            reject(r)
        try:
            llm.run(_own_share(llm, requests), finished, engine_rejected, collect_on_rank0=True)
        except KeyboardInterrupt:
            progress.finish(len(rejections))
            print(f"deepinfer-run: interrupted; {tokens[0]} finished requests are in the output "
                  "(continue with --resume)", file=sys.stderr)
            return 130
    progress.finish(len(rejections))
    if args.stats:
        for key, value in llm.engine.stats.summary().items():
            print(f"{_prog()}: {key} = {value}", file=sys.stderr)
        for key, value in llm.startup_s.items():
            print(f"{_prog()}: startup_{key}_s = {value:.2f}", file=sys.stderr)
    return 3 if rejections else 0


# ---- multi-rank (runtime/lockstep.py) -----------------------------------------------------------
def _own_share(llm, requests: list) -> list:
    """This DP rank's requests: input line index % dp == dp rank (every rank reads the whole
    input the same way; results do not depend on the split)."""
    d = llm.dist
    return requests if d is None else [r for r in requests if r.index % d.dp_size == d.dp_rank]


def _run_other_rank(llm, requests: list) -> int:
    """A rank other than 0: runs its share; its results and rejections go to rank 0."""
    try:
        llm.run(_own_share(llm, requests), lambda out: None, lambda req, reason: None,
                collect_on_rank0=True)
    except KeyboardInterrupt:
        return 130
    return 0
# ---- end multi-rank -----------------------------------------------------------------------------


class _Stdout:
    """The results writer's interface over stdout (no resume, no fsync)."""

    def write_output(self, output) -> None:
        self._line(result_record(output))

    def write_rejection(self, rejection: Rejection) -> None:
        self._line(rejection.to_record())

    @staticmethod
    def _line(record) -> None:
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        sys.stdout.flush()

    def __enter__(self) -> _Stdout:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
