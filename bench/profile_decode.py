"""Where a decode step of the engine spends its time on the GPU (tiny model, paged path).

    TRITON_INTERPRET=0 python bench/profile_decode.py [--prompts 16] [--tokens 24] [--copies]

For the ``triton`` and ``gpu-ref`` plans of ``bench/h200_model_check.py`` (same topology, same
block cap), runs ``LLM.generate`` once to warm up, then once under ``torch.profiler`` and
prints: the median wall time of the engine's own decode steps (``EngineStats.decode_step_ms``:
the batched paged path the engine really runs, pipeline on), and the ops with the most CUDA time
and the most CPU time. Figures, not a test.

``--copies``: the ``triton`` plan only, without CUDA graphs, under ``with_stack``: every torch
copy / dtype conversion op (``aten::copy_``, ``_to_copy``, ``clone``) of the decode steps with
the deepinfer call site that issued it and its count per step — the 84 stray ``direct_copy``
kernels of the slice's decode graph (session 9) come from such calls.
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
    ap.add_argument("--copies", action="store_true", help="call sites of torch copies")
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
        if args.copies:
            return _copies(LLM(plans["triton"], cuda_graphs=False), prompts, params)
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


COPY_OPS = ("aten::copy_", "aten::_to_copy", "aten::clone")


def _copies(llm, prompts, params) -> int:
    """Print each copy op's deepinfer call sites, counts per decode step, and CUDA time."""
    llm.generate(prompts, params)  # warm-up
    llm.engine.stats.decode_step_ms.clear()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 with_stack=True, record_shapes=True) as prof:
        llm.generate(prompts, params)
    steps = max(1, len(llm.engine.stats.decode_step_ms))
    print(f"=== triton plan, no graphs: {steps} decode steps; copy ops by call site "
          f"(count per step, CUDA us per step, input shapes/dtypes)")
    rows = []
    for avg in prof.key_averages(group_by_input_shape=True, group_by_stack_n=12):
        if avg.key not in COPY_OPS:
            continue
        sites = [f for f in avg.stack if "deepinfer" in f or "/runtime/" in f
                 or "/kernels/" in f]
        rows.append((avg.count / steps, avg.device_time_total / steps, avg.key,
                     avg.input_shapes, sites[:4]))
    for count, us, key, shapes, sites in sorted(rows, key=lambda r: -r[0])[:40]:
        print(f"{count:6.1f}/step {us:8.1f} us  {key} {shapes}")
        for site in sites:
            print(f"        {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
