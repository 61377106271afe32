"""Roofline of decode and prefill steps for a plan, against ceilings measured on this GPU.

    python bench/roofline.py plan/ [--decode 1x4096,64x4096 ...] [--prefill 4096,16384]
                             [--json bench/results/roofline.json]

For each step shape it counts the bytes the step must move through HBM (dense weights once,
the routed-expert slots a batch of that size touches, KV actually read — window records,
the top-k compressed entries, the index keys each indexer scans —, engram rows, activations)
and its FLOPs, with the planner's cost model (``planner/passes/cost_model.py``, the same formulas
the plan's report uses), then divides by ceilings measured in the same run on the same GPU:

- HBM bandwidth: a large device-to-device copy, bytes read + bytes written over time;
- bf16 and fp8 dense matmul rates: 8192³ products on random data (``torch.matmul`` bf16,
  ``torch._scaled_mm`` e4m3 with fp32 scales).

Roofline time = max(bytes / bandwidth, matmul FLOPs / fp8 rate + attention FLOPs / bf16 rate).
Without a GPU it uses the plan's datasheet numbers and says so. Benchmarks compare measured step
times against this (η = roofline / measured); nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from deepinfer.artifacts.model_spec import ModelSpec
from deepinfer.artifacts.plan_dir import read_plan
from deepinfer.planner.passes.cost_model import step_cost
from deepinfer.planner.topology import Topology


def topology_of(plan: dict) -> Topology:
    """The plan's normalized topology back as the planner's dataclasses."""
    return Topology.from_dict(plan["topology"])


def spec_of(plan: dict) -> ModelSpec:
    from deepinfer.artifacts.model_spec import load_model_spec

    return load_model_spec(plan["topology"]["model"]["path"])


def median_ms(fn, iters: int = 20, calls: int = 1) -> float:
    """Median CUDA-event time (ms) of fn() over iters runs, after 3 warm-ups. ``calls`` > 1:
    the mean of that many back-to-back calls between the events, so that a Python launch
    (tens of µs for a Triton kernel) hides behind the GPU's queue instead of being timed."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def graph_us(fn, calls: int, iters: int = 20) -> float:
    """Median µs per call of ``calls`` back-to-back fn() captured in one CUDA graph (a decode
    step replays graphs: launch latency is not part of a kernel's cost), over ``iters`` replays
    after 3 warm-ups; fn() compiles and warms the allocator on a side stream first."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return median_ms(graph.replay, iters) * 1e3 / calls


def measure_ceilings() -> dict:
    """HBM bytes/s (copy: read + write), bf16 and fp8 matmul FLOP/s, measured on random data."""
    n_bytes = 4 << 30
    copy_time_ms = copy_ms(n_bytes)
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bf16_ms = median_ms(lambda: a @ b)
    a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    fp8_ms = median_ms(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                                 out_dtype=torch.bfloat16))
    return {"source": f"measured on {torch.cuda.get_device_name()}",
            "hbm_bytes_per_s": 2 * n_bytes / (copy_time_ms * 1e-3),
            "bf16_flops_per_s": 2 * n ** 3 / (bf16_ms * 1e-3),
            "fp8_flops_per_s": 2 * n ** 3 / (fp8_ms * 1e-3)}


def copy_ms(n_bytes: int) -> float:
    """Median ms of a device-to-device copy of ``n_bytes`` (the HBM ceiling's measurement)."""
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    return median_ms(lambda: dst.copy_(src))


def datasheet_ceilings(topo: Topology) -> dict:
    hw = topo.hardware
    return {"source": f"datasheet ({hw.device}; no GPU here)",
            "hbm_bytes_per_s": hw.hbm_bytes_per_s, "bf16_flops_per_s": hw.bf16_flops_per_s,
            "fp8_flops_per_s": hw.fp8_flops_per_s}


def roofline_ms(cost: dict, ceil: dict) -> dict:
    f = cost["flops"]
    mem_ms = cost["bytes"]["total_bytes"] / ceil["hbm_bytes_per_s"] * 1e3
    comp_ms = ((f["dense_flops"] + f["expert_flops"]) / ceil["fp8_flops_per_s"]
               + (f["attention_flops"] + f["indexer_flops"]) / ceil["bf16_flops_per_s"]) * 1e3
    return {"memory_ms": mem_ms, "compute_ms": comp_ms, "roofline_ms": max(mem_ms, comp_ms),
            "bound": "memory" if mem_ms >= comp_ms else "compute"}


def rooflines(plan: dict, decode: list[tuple[int, int]], prefill: list[int], ceil: dict) -> dict:
    spec, topo = spec_of(plan), topology_of(plan)
    placement = plan["expert_placement"]
    dp_per_ep = max(1, topo.parallel.ep // topo.parallel.cp)
    out = {"decode": [], "prefill": []}
    for batch, context in decode:
        cost = step_cost(spec, topo, placement, batch, context, dp_per_ep, batch)
        out["decode"].append({"batch": batch, "context": context,
                              "bytes": cost["bytes"]["total_bytes"],
                              "flops": cost["flops"]["total_flops"], **roofline_ms(cost, ceil)})
    for prompt in prefill:
        rows, steps, cost = prefill_cost(plan, prompt)
        r = roofline_ms(cost, ceil)
        out["prefill"].append({"prompt_len": prompt, "rows_per_step": rows, "steps": steps,
                               "bytes": cost["bytes"]["total_bytes"],
                               "flops": cost["flops"]["total_flops"], **r,
                               "prompt_roofline_ms": r["roofline_ms"] * steps})
    return out


def prefill_cost(plan: dict, prompt: int) -> tuple[int, int, dict]:
    """(rows per step, steps, the cost model's ``step_cost`` of one step) of a lone prompt:
    steps of ``max_num_batched_tokens`` rows at the average context prompt / 2, logits for one
    row (the head runs on a step's prompt-last row only)."""
    spec, topo = spec_of(plan), topology_of(plan)
    dp_per_ep = max(1, topo.parallel.ep // topo.parallel.cp)
    rows = min(prompt, topo.scheduler.max_num_batched_tokens)
    cost = step_cost(spec, topo, plan["expert_placement"], rows, prompt / 2, dp_per_ep, rows,
                     logit_rows=1)
    return rows, -(-prompt // rows), cost


def _pairs(text: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in item.split("x")) for item in text.split(",") if item]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("plan_dir")
    ap.add_argument("--decode", default="1x4096,8x4096,32x4096,64x4096,128x4096,256x4096,"
                    "1x32768,8x32768,32x32768,64x32768,128x32768,256x32768")
    ap.add_argument("--prefill", default="4096,16384")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    plan = read_plan(args.plan_dir)
    ceil = measure_ceilings() if torch.cuda.is_available() else \
        datasheet_ceilings(topology_of(plan))
    res = rooflines(plan, _pairs(args.decode), [int(x) for x in args.prefill.split(",") if x],
                    ceil)
    res["ceilings"] = ceil
    res["plan_id"] = plan["plan_id"]
    res["date"] = time.strftime("%Y-%m-%d")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, sort_keys=True)
    print(f"ceilings ({ceil['source']}): HBM {ceil['hbm_bytes_per_s'] / 1e12:.2f} TB/s, "
          f"bf16 {ceil['bf16_flops_per_s'] / 1e12:.0f} TFLOP/s, "
          f"fp8 {ceil['fp8_flops_per_s'] / 1e12:.0f} TFLOP/s")
    print(f"{'step':<8}{'batch':>6}{'context':>8}{'GB':>9}{'TFLOP':>9}{'mem ms':>9}"
          f"{'comp ms':>9}{'roof ms':>9}  bound")
    for d in res["decode"]:
        print(f"{'decode':<8}{d['batch']:>6}{d['context']:>8}{d['bytes'] / 1e9:>9.2f}"
              f"{d['flops'] / 1e12:>9.2f}{d['memory_ms']:>9.3f}{d['compute_ms']:>9.3f}"
              f"{d['roofline_ms']:>9.3f}  {d['bound']}")
    for p in res["prefill"]:
        print(f"{'prefill':<8}{p['rows_per_step']:>6}{p['prompt_len']:>8}{p['bytes'] / 1e9:>9.2f}"
              f"{p['flops'] / 1e12:>9.2f}{p['memory_ms']:>9.3f}{p['compute_ms']:>9.3f}"
              f"{p['roofline_ms']:>9.3f}  {p['bound']} ({p['steps']} steps: "
              f"{p['prompt_roofline_ms']:.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
