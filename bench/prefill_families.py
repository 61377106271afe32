"""A prefill's kernel table by family, each family against its own compute and HBM floors:
which kernel holds the prompt back, with its own η (issue 7: "where a target is missed, the
note says which kernel or overhead holds it back, with its own η").

    python bench/prefill_families.py bench/results/<run>/…-prefill.json

A family is the kernels whose names start with its prefixes; its floor is the cost model's
FLOPs of that work (``planner/passes/cost_model.py``, the same numbers as the prefill's
roofline) over the rate the roofline counts for it — the routed experts and the dense GEMMs
(projections, shared expert, router, mHC coefficients, head) at the FP8 matmul rate, attention
and the indexer's scores at the bf16 rate — and, for the FP8 / FP4 GEMMs, over the bf16 rate as
well (this engine runs them exactly on bf16 tensor cores). η = floor / measured GPU time. The
rest (norms, quantization, gathers, top-k, copies: memory-bound kernels with no FLOP floor) is
one row. ``prefill.py`` prints this table under its kernel table; the command above rebuilds it
from a results JSON (its plan compiled here: no GPU needed).
"""

from __future__ import annotations

import argparse
import json
import sys

# (family, the cost model's FLOPs key, the rate the roofline counts, the cost model's bytes
# key of what the family must read from HBM (None: none counted), kernel name prefixes)
FAMILIES = (
    ("routed experts", "expert_flops", "fp8", "expert_bytes",
     ("_w4a16_prefill", "_w4a8_prefill", "_moe_gemm")),
    ("dense GEMMs", "dense_flops", "fp8", "dense_weight_bytes",
     ("_linear_wide", "_linear_ss", "_linear_kernel", "_linear_decode", "_hc_coeffs",
      "_route_scores", "_gemm_head")),
    ("attention", "attention_flops", "bf16", "kv_bytes", ("_attn_prefill", "_sparse_attn")),
    ("indexer scores", "indexer_flops", "bf16", None, ("_index_scores", "_scores_keys_m")),
)
REST = "rest (memory-bound, no FLOP floor)"


def family_of(name: str) -> str:
    """The family of a kernel (or profiler activity) name; REST when no prefix matches."""
    for family, *_, prefixes in FAMILIES:
        if name.startswith(prefixes):
            return family
    return REST


def _ratio_to(measured: float):
    """f -> f / measured (None where either is missing or 0)."""
    return lambda f: f / measured if measured and f is not None else None


def family_rows(kernels: list[dict], flops: dict, steps: int, ceilings: dict,
                nbytes: dict | None = None) -> list[dict]:
    """Rows {family, calls, us, floor_us, eta, bf16_floor_us, bf16_eta, mem_floor_us,
    bound_floor_us, bound_eta} in FAMILIES order, then REST (floors None). kernels: a profile's
    table ({"name", "calls", "us_per_replay"}); flops, nbytes: one step's
    ``step_cost(...)["flops"]`` and ``["bytes"]``, times ``steps``; ceilings: the run's
    ``{"fp8_flops_per_s", "bf16_flops_per_s", "hbm_bytes_per_s"}``.

    ``mem_floor_us``: the family's HBM bytes at the copy rate (the routed experts' weights —
    at 4K tokens every expert is touched, and 57.8 GB of MXFP4 weights outweigh their FLOPs at
    the FP8 rate —, the dense weights, the KV the attention reads); ``bound_floor_us`` the
    larger of that and the compute floor: the family's own roofline, ``bound_eta`` against
    it. None without ``nbytes`` or a byte count for the family."""
    us = {f[0]: 0.0 for f in FAMILIES} | {REST: 0.0}
    calls = dict.fromkeys(us, 0)
    for k in kernels:
        fam = family_of(k["name"])
        us[fam] += k["us_per_replay"]
        calls[fam] += k["calls"]
    rows = []
    hbm = ceilings.get("hbm_bytes_per_s")
    for family, key, rate, bytes_key, _ in FAMILIES:
        work = flops[key] * steps
        floor = work / ceilings[f"{rate}_flops_per_s"] * 1e6
        bf16 = work / ceilings["bf16_flops_per_s"] * 1e6
        mem = (nbytes[bytes_key] * steps / hbm * 1e6
               if nbytes is not None and bytes_key is not None and hbm else None)
        bound = None if mem is None else max(floor, mem)
        measured = us[family]
        eta = _ratio_to(measured)
        rows.append({"family": family, "calls": calls[family], "us": measured,
                     "floor_us": floor, "eta": eta(floor), "bf16_floor_us": bf16,
                     "bf16_eta": eta(bf16), "mem_floor_us": mem, "bound_floor_us": bound,
                     "bound_eta": eta(bound)})
    rows.append({"family": REST, "calls": calls[REST], "us": us[REST], "floor_us": None,
                 "eta": None, "bf16_floor_us": None, "bf16_eta": None, "mem_floor_us": None,
                 "bound_floor_us": None, "bound_eta": None})
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: family, calls, GPU ms, floor ms (the roofline's rate), η, bf16 floor, η bf16,
    HBM floor, the family's own floor (the larger) and η against it; then, under the table,
    the sum of the families' own floors (each family at its own bound, one after another)."""

    def ms(v):
        return "" if v is None else f"{v / 1e3:.2f}"

    def eta(v):
        return "" if v is None else f"{v:.2f}"

    out = ["| family | calls | GPU ms | floor ms (roofline rate) | η | floor ms at bf16 | "
           "η at bf16 | HBM floor ms | own floor ms | η own |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['family']} | {r['calls']} | {ms(r['us'])} | {ms(r['floor_us'])} | "
                   f"{eta(r['eta'])} | {ms(r['bf16_floor_us'])} | {eta(r['bf16_eta'])} | "
                   f"{ms(r.get('mem_floor_us'))} | {ms(r.get('bound_floor_us'))} | "
                   f"{eta(r.get('bound_eta'))} |")
    own = [r.get("bound_floor_us") if r.get("bound_floor_us") is not None else r["floor_us"]
           for r in rows if r["floor_us"] is not None]
    if any(r.get("bound_floor_us") is not None for r in rows):
        out.append(f"\nthe families' own floors summed (each at its own bound, in turn): "
                   f"{sum(own) / 1e3:.2f} ms; their compute floors: "
                   f"{sum(r['floor_us'] for r in rows if r['floor_us'] is not None) / 1e3:.2f} ms")
    return "\n".join(out)


def from_profile(prof: dict, plan: dict, ceilings: dict) -> list[dict]:
    """family_rows of a kernel profile of ``prof["prompts"]`` (default 1) prompts of
    ``prof["prompt_len"]`` tokens (prefill.py's lone-prompt or batch table) against ``plan``
    (the plan the run used): each prompt's floor as the roofline counts it (its steps of
    ``max_num_batched_tokens`` rows), times the prompts."""
    import roofline

    _, steps, cost = roofline.prefill_cost(plan, prof["prompt_len"])
    return family_rows(prof["kernels"], cost["flops"], steps * prof.get("prompts", 1), ceilings,
                       cost["bytes"])


def from_results(res: dict, plan: dict) -> list[dict]:
    """from_profile of a prefill results JSON's lone-prompt kernel profile and ceilings."""
    return from_profile(res["kernels"], plan, res["ceilings"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="a bench/prefill.py results JSON with a kernel profile")
    args = ap.parse_args(argv)
    try:
        with open(args.results) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        print(f"prefill_families: {args.results}: cannot read a results JSON ({e})",
              file=sys.stderr)
        return 2
    if not res.get("kernels") or "topology" not in res:
        print(f"prefill_families: {args.results}: no 'kernels' profile or 'topology' field "
              "(run bench/prefill.py without --no-profile)", file=sys.stderr)
        return 2
    import tempfile
    from pathlib import Path

    import bench_common as bc

    from deepinfer.artifacts.plan_dir import read_plan

    topology = Path(res["topology"])
    if not topology.exists() and not res["topology"].startswith("builtin:"):
        topology = bc.REPO / "artifacts" / "topologies" / topology.name  # the run's checkout
    if not topology.exists() and not res["topology"].startswith("builtin:"):
        print(f"prefill_families: {args.results}: field 'topology': {res['topology']} is not "
              "here (nor under artifacts/topologies/)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        topology = res["topology"] if res["topology"].startswith("builtin:") else str(topology)
        plan = read_plan(bc.make_plan_dir(Path(tmp), topology, lambda compiled: 64))
        rows = from_results(res, plan)
        batches = [(b, from_profile(b["kernels"], plan, res["ceilings"]))
                   for b in res.get("prefill_batch") or [] if b.get("kernels")]
    if plan["plan_id"] != res.get("plan_id"):
        print(f"note: this checkout compiles plan {plan['plan_id'][:12]}, the run used "
              f"{str(res.get('plan_id'))[:12]}: the FLOPs are this checkout's cost model")
    print(f"{res['kernels']['prompt_len']}-token prefill, commit {res.get('commit')}, "
          f"{res.get('gpu')}")
    print(table(rows))
    for b, batch_rows in batches:
        print(f"\n{b['prompts']} x {b['prompt_len']}-token prompts in one generate:")
        print(table(batch_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
