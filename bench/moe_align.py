"""Grouping MoE pairs by expert (kernels/triton/moe_align.py) against the torch version.

    TRITON_INTERPRET=0 python bench/moe_align.py [--tokens 1 64 256 1365 1366 4096 32768]
        [--experts 384] [--topk 6] [--block-m 16 128] [--variants 8192:4096 4096:2048 ...]
    python bench/moe_align.py --smoke                              # CPU interpreter, no timings

Per (tokens, block_m): µs per call as a step runs it, inside a CUDA graph of ``--calls``
back-to-back calls (``roofline.graph_us``: median of 20 replays), for ``align_pairs`` (one
program up to MAX_PAIRS pairs, two launches of CHUNK-pair programs above) and the torch version
``moe_experts._align_pairs`` (~20 launches); the host µs per eager call of each (best of 3 loops
of --calls calls, the GPU drained after each loop: what the prefill layer's host pays); and
whether the two outputs are equal. Ids uniform over the experts. ``--variants
MAX_PAIRS:CHUNK``: the one-program limit and the chunk size (``moe_align``'s settings, read at
the call), one row each; the first is the module's. The floor a launch cannot
beat is its latency (~2-3 µs on the H200): the bytes moved (ids 8 B a pair, rows 4 B) take
< 1 µs at HBM speed at every size here.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import host_us_per_call, smoke_or_gpu  # noqa: E402


def _ids(tokens: int, experts: int, topk: int, device: str) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(tokens)
    return torch.randint(0, experts, (tokens, topk), device=device, generator=gen)


def _equal(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+",
                    default=[1, 64, 256, 1365, 1366, 4096, 8192, 32768])
    ap.add_argument("--experts", type=int, default=384)
    ap.add_argument("--topk", type=int, default=6)
    ap.add_argument("--block-m", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--variants", nargs="+", default=None,
                    help="MAX_PAIRS:CHUNK pairs (default: the module's, then 4096:4096 and "
                         "8192:2048)")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)

    def smoke() -> None:
        from deepinfer.kernels.triton import moe_align
        from deepinfer.kernels.triton.moe_experts import _align_pairs

        for tokens in (3, 1500):
            ids = _ids(tokens, args.experts, args.topk, "cpu")
            ok = _equal(moe_align.align_pairs(ids, args.experts, 16),
                        _align_pairs(ids, args.experts, 16))
            print(f"smoke tokens {tokens} pairs {ids.numel()}: equal {ok}")
            assert ok

    def bench() -> None:
        from roofline import graph_us

        from deepinfer.kernels.triton import moe_align
        from deepinfer.kernels.triton.moe_experts import _align_pairs

        variants = args.variants or [f"{moe_align.MAX_PAIRS}:{moe_align.CHUNK}", "4096:4096",
                                     "8192:2048"]
        print(f"## align_pairs — {torch.cuda.get_device_name()}, {args.experts} experts, "
              f"top-{args.topk}")
        print("| tokens | pairs | BM | MAX_PAIRS:CHUNK | path | kernel µs | torch µs | "
              "host µs kernel | host µs torch | equal |")
        print("|---:|---:|---:|---|---|---:|---:|---:|---:|---|")
        torch_us: dict[tuple[int, int], tuple[float, float]] = {}
        for tokens, variant, bm in itertools.product(args.tokens, variants, args.block_m):
            max_pairs, chunk = (int(v) for v in variant.split(":"))
            assert 0 < max_pairs <= 8192 and chunk & (chunk - 1) == 0 and chunk <= 8192, \
                f"--variants {variant}: MAX_PAIRS in 1..8192, CHUNK a power of 2 <= 8192"
            moe_align.MAX_PAIRS, moe_align.CHUNK = max_pairs, chunk
            ids = _ids(tokens, args.experts, args.topk, "cuda")
            pairs = ids.numel()
            path = "one" if pairs <= max_pairs else f"chunks x{-(-pairs // chunk)}"

            def ours(ids=ids, bm=bm):
                return moe_align.align_pairs(ids, args.experts, bm)

            def torch_version(ids=ids, bm=bm):
                return _align_pairs(ids, args.experts, bm)

            equal = _equal(ours(), torch_version())
            if (tokens, bm) not in torch_us:  # the torch version once per size
                torch_us[tokens, bm] = (graph_us(torch_version, args.calls),
                                        host_us_per_call(torch_version, args.calls))
            t_us, ht = torch_us[tokens, bm]
            k_us, hk = graph_us(ours, args.calls), host_us_per_call(ours, args.calls)
            print(f"| {tokens} | {pairs} | {bm} | {variant} | {path} | {k_us:.1f} | "
                  f"{t_us:.1f} | {hk:.1f} | {ht:.1f} | {equal} |", flush=True)

    return smoke_or_gpu(args.smoke, smoke, bench)


if __name__ == "__main__":
    sys.exit(main())
