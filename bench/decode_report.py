"""The tables of ``bench/decode.py`` (also of a partial result JSON: ``decode.py --report``)."""

from __future__ import annotations

import bench_common as bc


def report(res: dict) -> None:
    """The tables (also of a partial result: the sections a timeout left out are skipped)."""
    for key, empty in (("decode", []), ("skipped", []), ("eager", []), ("kernels", [])):
        res.setdefault(key, empty)
    c = res.get("ceilings") or {"source": "not measured", "hbm_bytes_per_s": 0,
                                "bf16_flops_per_s": 0, "fp8_flops_per_s": 0}
    print(f"\n## decode — {res['gpu']}, commit {res['commit'][:10]}, {res['date']}")
    print(f"ceilings ({c['source']}): HBM {c['hbm_bytes_per_s'] / 1e12:.2f} TB/s, "
          f"bf16 {c['bf16_flops_per_s'] / 1e12:.3g} TFLOP/s, fp8 "
          f"{c['fp8_flops_per_s'] / 1e12:.3g} TFLOP/s")
    eager = {(e["batch"], e["context"]): e for e in res["eager"] if "step_ms" in e}
    print("\n| batch | context | tokens/s | step ms | roofline ms | η | eager ref ms | speedup |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in res["decode"]:
        e = eager.get((d["batch"], d["context"]))
        tail = f"{e['step_ms']:.1f} | {e['speedup']:.1f}× |" if e else "- | - |"
        print(f"| {d['batch']} | {d['context']} | {d['tokens_per_s']:,.0f} | "
              f"{d['step_ms']:.3f} | {d['roofline_ms']:.3f} | {d['eta']:.3f} | {tail}")
    for s in res["skipped"]:
        print(f"skipped batch {s['batch']} @ {s['context']}: {s['reason']}")
    for k in res["kernels"]:
        if "error" in k:
            print(f"\nkernels at batch {k['batch']} @ {k['context']}: {k['error']}")
            continue
        bc.print_kernel_profile(f"kernels at batch {k['batch']} @ {k['context']}", k)
    if "host_gap" in res:
        print_host_gap(res["host_gap"])
    if "startup" in res:
        print_startup(res["startup"])
    print_targets(res)


def print_host_gap(h: dict) -> None:
    gap = h["idle_gap"]
    gap_text = (f"median {gap['median_us']:.1f} µs, p90 {gap['p90_us']:.1f} µs over "
                f"{gap['count']} step pairs" if gap.get("count") else gap.get("note", "-"))
    print(f"\nengine loop ({h['prompts']} prompts x {h['prompt_len']} tokens, "
          f"{h['output_tokens']} out): host {h['host_ms_per_step']:.3f} ms/step, decode step "
          f"{h['decode_step_ms_median']:.3f} ms (median), {h['output_tokens_per_s']:,.0f} out "
          f"tok/s; GPU idle gap between decode steps: {gap_text}")
    for key, where in (("runtime_calls", "whole loop"), ("runtime_calls_in_launch", "launches")):
        if h.get(key):
            print(f"CUDA API calls ({where}): " + ", ".join(
                f"{r['name']} {r['calls']}x {r['total_us'] / 1e3:.1f} ms (max {r['max_us']:.0f} µs)"
                for r in h[key]))


def print_startup(s: dict) -> None:
    cache = s["triton_cache"]
    print(f"start-up {s['load_s']:.1f} s (weights {s.get('weights_s') or 0:.1f} s, graph "
          f"capture {s['capture_s']:.1f} s of {len(s['graph_buckets'])} buckets), first token "
          f"{s['first_token_s']:.1f} s, Triton cache {'cold' if cache['cold'] else 'warm'} "
          f"({cache['dir']}, {cache['entries']} entries before)")
    if "full_plan_capture_estimate_s" in s and len(s["graph_buckets"]) < len(
            s["plan_graph_buckets"]):
        est = s["first_token_s"] - s["capture_s"] + s["full_plan_capture_estimate_s"]
        print(f"with all {len(s['plan_graph_buckets'])} plan buckets: capture ≈ "
              f"{s['full_plan_capture_estimate_s']:.1f} s, first token ≈ {est:.1f} s (estimate)")


def print_targets(res: dict) -> None:
    """The issue's decode targets, met or not."""
    big = [d for d in res["decode"] if d["batch"] >= 64]
    gap = res.get("host_gap", {}).get("idle_gap", {})
    checks = [("decode eta >= 0.6 at batch >= 64",
               min(d["eta"] for d in big) if big else None, lambda v: v >= 0.6),
              ("median GPU idle gap < 30 us", gap.get("median_us"), lambda v: v < 30),
              ("start-up (first token) < 60 s", res.get("startup", {}).get("first_token_s"),
               lambda v: v < 60)]
    for text, value, ok in checks:
        verdict = "not measured" if value is None else \
            f"{value:.3g}: {'met' if ok(value) else 'NOT met'}{bc.target_card_note(res.get('gpu'))}"
        print(f"target {text}: {verdict}")
