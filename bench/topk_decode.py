"""The indexer's position-sorted top-k (kernels/triton/topk.py): stage path vs radix vs bisect.

    TRITON_INTERPRET=0 python bench/topk_decode.py [--rows 1 8 64 256] [--entries 1024 8192]
        [--k 512] [--variants 8:4096:8,...] [--ties] [--eager] [--width 16384] [--causal 2]
    python bench/topk_decode.py --smoke                           # CPU interpreter, no timings

Decode shapes: one row per query (rows), each over ``entries`` compressed-KV scores (4K / 32K
context at compression ratio 4: 1,024 / 8,192), k = index_topk = 512, every entry visible
(``num_visible`` = entries, passed as the model passes it). ``--width W``: rows W wide with only
the first ``entries`` visible and -inf beyond, as the decode graph has them (its rows are
max_model_len / ratio wide: 16,384 in the slice plan). Scores are random normal fp32 (with
``--ties``: rounded to 1/4, so the k-th score is tied across many positions).

``--causal RATIO``: a prefill's rows instead (query n sees (n + 1) // RATIO of the scores; a 4K
prompt at ratio 2: ``--rows 4096 --entries 2048 --causal 2``); GB/s count the visible scores.

Paths (``topk_positions(method=...)``):
  stage    blocked ``tl.topk`` over tiles of 4096 packed (score, position) keys, stages until one
           tile is left, then a ``tl.sort`` of the k survivors by position (until session 9);
  radix    ``topk_radix``: one program per row, histogram passes over the 32-bit order key, then
           one ordered compaction (no sort). A variant ``BITS:TILE:WARPS`` sets
           ``RADIX_BITS`` (bits per pass: 4 / 8), ``RADIX_TILE`` (scores per tile; a row up to
           it stays in registers) and ``NUM_WARPS``; the first is the module's default;
  bisect   ``topk_bisect``: one warp per row, the k-th key by bisection, the same compaction
           (rows up to its ``MAX_ENTRIES``, without ``--width``).
Per (rows, entries, path): µs per call as the decode step runs it, i.e. inside a CUDA graph of
``--calls`` back-to-back calls (median over 20 replays after 3 warm-ups, CUDA events, divided by
the calls; ``--eager``: also the median of 20 single eager calls after 3 warm-ups), the speed-up
over stage, GB/s of the scores read once (rows x entries x 4 B) and its share of the HBM roofline
(``--hbm-tbs``, 4.3 TB/s: H200 copy bandwidth), and whether the output equals the torch
reference's exactly (so every path's equals every other's). A measurement for choosing the
path and variant, not a test.
"""

from __future__ import annotations

import argparse
import sys

import torch

DEFAULT_VARIANTS = "8:4096:8,8:4096:4,8:4096:16,8:2048:8,8:1024:4,4:4096:8"


def set_variant(topk_radix, text: str) -> None:
    """``BITS:TILE:WARPS`` -> the radix module's RADIX_BITS, RADIX_TILE, NUM_WARPS."""
    bits, tile, warps = map(int, text.split(":"))
    topk_radix.RADIX_BITS, topk_radix.RADIX_TILE, topk_radix.NUM_WARPS = bits, tile, warps


def make_scores(rows: int, entries: int, ties: bool, device: str) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(rows * 100003 + entries)
    s = torch.randn(rows, entries, generator=g)
    return ((s * 4).round() / 4 if ties else s).to(device)


def smoke() -> None:
    """Tiny shapes under the interpreter: stage and every radix variant == the reference."""
    from deepinfer.kernels.reference import indexer as ref
    from deepinfer.kernels.triton import topk, topk_radix

    topk.TOPK_TILE = 16  # several stages
    for rows, entries, k, ties in ((1, 40, 16, True), (3, 100, 64, False), (2, 30, 512, True)):
        s = make_scores(rows, entries, ties, "cpu")
        s[:, entries - 7:] = float("-inf")
        vis = torch.full((rows,), entries - 7, dtype=torch.int64)
        want = ref.topk_positions(s, k)
        assert torch.equal(topk.topk_positions(s, k, vis, method="stage"), want)
        for text in ("8:32:4", "4:4096:4"):  # several tiles per row / one tile
            set_variant(topk_radix, text)
            got = topk.topk_positions(s, k, vis, method="radix")
            print(f"smoke rows={rows} entries={entries} k={k} radix {text}: "
                  f"equal {torch.equal(got, want)}")
            assert torch.equal(got, want), text
        got = topk.topk_positions(s, k, vis, method="bisect")
        print(f"smoke rows={rows} entries={entries} k={k} bisect: equal {torch.equal(got, want)}")
        assert torch.equal(got, want), "bisect"
    print("smoke ok (no timings under the interpreter)")


def graph_us(fn, calls: int) -> float:
    """Median µs per call of ``calls`` calls in one CUDA graph (roofline.graph_us)."""
    from bench_common import roofline

    return roofline().graph_us(fn, calls)


def eager_us(fn) -> float:
    """Median µs of single eager calls (CUDA events, roofline.median_ms)."""
    from bench_common import roofline

    return roofline().median_ms(fn) * 1e3


def bench(args: argparse.Namespace) -> None:
    from deepinfer.kernels.reference import indexer as ref
    from deepinfer.kernels.triton import topk, topk_bisect, topk_radix

    hbm = args.hbm_tbs * 1e12
    variants = args.variants.split(",")
    print(f"{torch.cuda.get_device_name()}: k={args.k}, scores {'tied' if args.ties else 'normal'}"
          f", width {args.width or '= entries'}, µs per call in a CUDA graph of {args.calls} "
          f"calls; HBM roofline {args.hbm_tbs} TB/s; radix variants BITS:TILE:WARPS")
    eager_col = " eager µs |" if args.eager else ""
    print(f"| rows | entries | path | µs |{eager_col} × stage | GB/s | of HBM | equal |")
    print("|---:|---:|---|---:|" + ("---:|" if args.eager else "") + "---:|---:|---:|---|")
    for rows in args.rows:
        for entries in args.entries:
            width = max(entries, args.width or entries)
            s = make_scores(rows, width, args.ties, "cuda")
            vis = torch.full((rows,), entries, dtype=torch.int64, device="cuda")
            if args.causal:  # query n sees (n + 1) // ratio scores
                vis = torch.clamp((torch.arange(rows, device="cuda") + 1) // args.causal,
                                  max=entries)
            s = s.masked_fill(torch.arange(width, device="cuda")[None, :] >= vis[:, None],
                              float("-inf"))
            want = ref.topk_positions(s.cpu(), args.k).cuda()
            n_bytes = int(vis.sum()) * 4
            base = None
            bisect = ["bisect"] if entries <= topk_bisect.MAX_ENTRIES and width == entries else []
            for path in ["stage"] + [f"radix {v}" for v in variants] + bisect:
                method = path.split()[0]
                if method == "radix":
                    set_variant(topk_radix, path.split()[1])
                def run(method=method, s=s, vis=vis):
                    return topk.topk_positions(s, args.k, vis, method=method)
                try:
                    got = run()
                    torch.cuda.synchronize()
                    us = graph_us(run, args.calls)
                except Exception as e:  # noqa: BLE001 - a variant that fails is a row
                    print(f"| {rows} | {entries} | {path} | failed: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:120]} |", flush=True)
                    continue
                base = us if base is None else base
                eager = f" {eager_us(run):.1f} |" if args.eager else ""
                print(f"| {rows} | {entries} | {path} | {us:.1f} |{eager} {base / us:.2f} | "
                      f"{n_bytes / us / 1e3:.0f} | {n_bytes / us * 1e6 / hbm:.3f} | "
                      f"{torch.equal(got, want)} |", flush=True)
            set_variant(topk_radix, variants[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[1, 8, 64, 256])
    parser.add_argument("--entries", type=int, nargs="*", default=[1024, 8192],
                        help="scores per row (context / compression ratio)")
    parser.add_argument("--k", type=int, default=512, help="index_topk")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS,
                        help="comma-separated radix BITS:TILE:WARPS")
    parser.add_argument("--ties", action="store_true", help="scores rounded to 1/4")
    parser.add_argument("--width", type=int, default=0,
                        help="row width (>= entries; the rest -inf and not visible)")
    parser.add_argument("--causal", type=int, default=0, metavar="RATIO",
                        help="a prefill's rows: query n sees (n + 1) // RATIO scores")
    parser.add_argument("--calls", type=int, default=20, help="calls per CUDA graph")
    parser.add_argument("--eager", action="store_true", help="also time single eager calls")
    parser.add_argument("--hbm-tbs", type=float, default=4.3, help="HBM roofline, TB/s")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter correctness check")
    args = parser.parse_args()
    from bench_common import smoke_or_gpu

    return smoke_or_gpu(args.smoke, smoke, lambda: bench(args))


if __name__ == "__main__":
    sys.exit(main())
