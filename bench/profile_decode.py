"""Where a decode step of the engine spends its time on the GPU (tiny model, paged path).

    TRITON_INTERPRET=0 python bench/profile_decode.py [--prompts 16] [--tokens 24]

For the ``triton`` and ``gpu-ref`` plans of ``bench/h200_model_check.py`` (same topology, same
block cap), runs ``LLM.generate`` once to warm up, then once under ``torch.profiler`` and
prints: the median wall time of the engine's own decode steps (``EngineStats.decode_step_ms``:
the batched paged path the engine really runs, pipeline on), and the ops with the most CUDA time
and the most CPU time. Figures, not a test.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

HERE = Path(__file__).resolve().parent


def _model_check():
    spec = importlib.util.spec_from_file_location("h200_model_check", HERE / "h200_model_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=24)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    mc = _model_check()
    from deepinfer.runtime.llm import LLM
    from deepinfer.runtime.sampling_params import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
    prompts = mc.make_prompts(args.prompts)
    with tempfile.TemporaryDirectory() as tmp:
        plans = mc.make_plans(Path(tmp))
        for name in ("triton", "gpu-ref"):
            llm = LLM(plans[name])
            llm.generate(prompts, params)  # warm-up: compile, autotune, allocator
            llm.engine.stats.decode_step_ms.clear()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                llm.generate(prompts, params)
            steps = llm.engine.stats.decode_step_ms
            print(f"\n=== {name}: {len(steps)} decode steps of <= {args.prompts} rows, median "
                  f"{statistics.median(steps):.1f} ms (min {min(steps):.1f}, max "
                  f"{max(steps):.1f})")
            table = prof.key_averages()
            for key in ("self_cuda_time_total", "self_cpu_time_total"):
                print(table.table(sort_by=key, row_limit=12, max_name_column_width=48))
    return 0


if __name__ == "__main__":
    sys.exit(main())
