"""``deepinfer-run``: argument parsing and reporting only.

Until plan replay lands (the runtime issue), ``deepinfer-run`` without a plan runs the built-in
demo batch greedily on a model (``--model``, default ``builtin:tiny`` with synthetic weights) and
writes one JSON line per request.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from deepinfer.artifacts.model_spec import ConfigError
from deepinfer.runtime.tokenizer import TokenizerError
from deepinfer.runtime.weights import CheckpointError

USER_ERRORS = (ConfigError, TokenizerError, CheckpointError, ValueError, OSError)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="deepinfer-run", description="Run a batch of prompts.")
    p.add_argument("plan_dir", nargs="?", help="plan directory from deepinfer-compile")
    p.add_argument("--model", default="builtin:tiny",
                   help="without a plan: builtin:tiny or a checkpoint directory")
    p.add_argument("--weights", default="auto", choices=("auto", "synthetic"))
    p.add_argument("--seed", type=int, default=0, help="seed of synthetic weights")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--output", help="write JSON lines here (atomically) instead of stdout")
    return p


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent or Path("."), prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.plan_dir is not None:
        if args.plan_dir.endswith((".yaml", ".yml")):
            print(f"deepinfer-run: {args.plan_dir} is a topology, not a plan; run "
                  f"`deepinfer-compile {args.plan_dir}` first", file=sys.stderr)
        else:
            print("deepinfer-run: replaying a plan directory is not implemented yet (runtime "
                  "issue); run without a plan to use --model directly", file=sys.stderr)
        return 2
    if args.max_tokens < 1:
        print("deepinfer-run: --max-tokens must be >= 1", file=sys.stderr)
        return 2
    from deepinfer.runtime.demo import demo_prompts, greedy_generate
    from deepinfer.runtime.model_loader import load_model

    start = time.perf_counter()
    try:
        lm = load_model(args.model, args.weights, args.seed)
    except USER_ERRORS as err:
        print(f"deepinfer-run: {err}", file=sys.stderr)
        return 2
    loaded = time.perf_counter()
    results = greedy_generate(lm, demo_prompts(), args.max_tokens)
    done = time.perf_counter()
    text = "".join(json.dumps(asdict(r)) + "\n" for r in results)
    if args.output:
        _write_atomic(Path(args.output), text)
    else:
        sys.stdout.write(text)
    n_out = sum(len(r.token_ids) for r in results)
    print(f"deepinfer-run: {len(results)} requests, {n_out} tokens in {done - loaded:.2f} s "
          f"({n_out / max(done - loaded, 1e-9):.1f} tok/s); model load {loaded - start:.2f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
