"""The indexer's paged scores at decode (``indexer.index_scores_paged``): v2 tilings and gl.

    TRITON_INTERPRET=0 python bench/index_decode.py [--shapes 64:4096,256:32768] [--ratio 1]
        [--width 65536] [--epb 64] [--heads 32] [--variants 128:1024:4,...] [--calls 20]
    python bench/index_decode.py --smoke                    # CPU interpreter, tiny shapes (CI)

Decode shapes: ``rows`` query rows (one per decode token) at ``context`` tokens, compression
``--ratio`` (default 1: the slice plan's index layers have ratios 1 and 2), so each row sees
``context / ratio`` index keys of its own (68-B FP4 records in a shuffled paged pool of ``--epb``
entries per block) and writes a score row of the static ``--width`` (-inf past its visible
count; default 65,536 = the slice's max_model_len / 1), ``--heads`` index heads (default 32, as
released) x 128. Session 9's round 29 ran ``--ratio 4 --heads 32 --width 65536 --shapes
64:16384,256:16384,64:131072,256:131072`` (4,096 / 32,768 visible).
Kernels (``PAGED_KERNEL``): ``gl`` (``index_paged_gluon``, session 15), v2 at each variant
``BT:PROGRAMS:WARPS`` (``PAGED_BLOCK_KEYS``, ``PAGED_TARGET_PROGRAMS``, ``PAGED_NUM_WARPS``; the
first is the module's default; session 14's v3 variants, the software-pipelined loads, lost at
every shape: commit 974b483 has them; v1 was removed in session 42 (measured slower: 74.8 ->
42.6 µs against v2), code at commit ad9ad7b). Each is timed as a CUDA graph of
``--calls`` back-to-back calls (roofline.graph_us: median of 20 replays), against its roofline:
max(bytes / copy bandwidth, FLOPs / bf16 matmul rate), both measured in the same run
(roofline.measure_ceilings); bytes = the visible records read once + the fp32 score rows written,
FLOPs = rows x visible x heads x 128 x 2. Prints µs per call, the roofline, η = roofline / time
and max |Δ| to the first variant's output (same exact products, fp32 sums in another order). A
measurement for choosing the kernel and tiling, not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT_SHAPES = "64:4096,256:4096,64:32768,256:32768"
DEFAULT_VARIANTS = "128:1024:4,128:512:4,128:2048:4,256:1024:8,64:2048:4"
HEAD_DIM = 128


_GL_SHIPPED: dict[str, tuple[int, int]] = {}  # the Gluon kernel's launch before any variant


def set_kernel(indexer, name: str) -> None:
    """``gl[:PROGRAMS[:STAGES]]`` (the Gluon kernel: programs over all rows, ring depth) or a
    v2 variant ``BT:PROGRAMS:WARPS`` -> the indexer module's settings."""
    from deepinfer.kernels.triton import index_paged_gluon

    if name.startswith("gl"):
        indexer.PAGED_KERNEL = "gl"
        shipped = _GL_SHIPPED.setdefault("launch", (index_paged_gluon.TARGET_PROGRAMS,
                                                    index_paged_gluon.STAGES))
        fields = [int(f) for f in name.split(":")[1:]]
        index_paged_gluon.TARGET_PROGRAMS, index_paged_gluon.STAGES = \
            (*fields, *shipped[len(fields):])[:2]
        return
    indexer.PAGED_KERNEL = "v2"
    bt, programs, warps = map(int, name.split(":"))
    indexer.PAGED_BLOCK_KEYS, indexer.PAGED_TARGET_PROGRAMS = bt, programs
    indexer.PAGED_NUM_WARPS = warps


def make_inputs(rows: int, visible: int, width: int, heads: int, epb: int, device: str):
    """FP4-grid bf16 queries, head weights, a shuffled paged pool holding each row's ``visible``
    records (and as many unused blocks again), block tables, num_visible."""
    from deepinfer.kernels import formats
    from deepinfer.kernels.reference import quant

    g = torch.Generator(device="cpu").manual_seed(rows * 7919 + visible)
    q = quant.fake_quant_fp4_ue8m0_block32(torch.randn(rows, heads, HEAD_DIM, generator=g))
    w = torch.randn(rows, heads, generator=g) * (HEAD_DIM * heads) ** -0.5
    mb = -(-width // epb)
    num_blocks = 2 * rows * -(-visible // epb) + 1
    keys = torch.randn(num_blocks * epb, HEAD_DIM, device=device)
    pool = formats.pack_index_key(keys)
    tables = torch.randint(0, num_blocks, (rows, mb), generator=g)
    vis = torch.full((rows,), visible, dtype=torch.int64)
    return (q.to(device=device, dtype=torch.bfloat16), w.to(device), pool, tables.to(device),
            vis.to(device))


def smoke() -> None:
    """Tiny shapes under the interpreter: every default v2 variant against the reference
    (fp32 queries there: the interpreter's bf16 arithmetic is not the GPU's)."""
    from deepinfer.kernels.reference import attention_fused as ref
    from deepinfer.kernels.triton import indexer

    for rows, visible, width, heads, epb in ((3, 40, 96, 8, 16), (2, 100, 130, 64, 4)):
        q, w, pool, tables, vis = make_inputs(rows, visible, width, heads, epb, "cpu")
        q = q.float()
        vis[0] = 0
        want = ref.index_scores_paged(q, w, pool, tables, vis, epb, width)
        for name in DEFAULT_VARIANTS.split(","):
            set_kernel(indexer, name)
            # interpreter-sized: 16-entry tiles, several per program
            indexer.PAGED_BLOCK_KEYS, indexer.PAGED_TARGET_PROGRAMS = 16, 4
            got = indexer.index_scores_paged(q, w, pool, tables, vis, epb, width)
            finite = torch.equal(torch.isfinite(got), torch.isfinite(want))
            err = float((got - want)[torch.isfinite(want)].abs().max())
            print(f"smoke rows={rows} visible={visible} {name}: finite pattern {finite}, "
                  f"max abs err vs reference {err:.2e}")
            assert finite and err < 1e-4, name
    print("smoke ok (no timings under the interpreter)")


def bench(args: argparse.Namespace) -> None:
    from bench_common import roofline

    from deepinfer.kernels.triton import indexer

    rl = roofline()
    ceil = rl.measure_ceilings()
    torch.cuda.empty_cache()
    hbm, bf16 = ceil["hbm_bytes_per_s"], ceil["bf16_flops_per_s"]
    variants = args.variants.split(",")
    print(f"{torch.cuda.get_device_name()}: {args.heads} index heads x {HEAD_DIM}, "
          f"ratio {args.ratio}, width {args.width}, {args.epb} entries per block; µs per call "
          f"in a CUDA graph of {args.calls} calls; copy {hbm / 1e12:.2f} TB/s, "
          f"bf16 {bf16 / 1e12:.0f} TFLOP/s (measured); v2 variants BT:PROGRAMS:WARPS")
    print("| rows | context | kernel | µs | roofline µs | η | max abs Δ vs first |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for shape in args.shapes.split(","):
        rows, context = map(int, shape.split(":"))
        visible = min(context // args.ratio, args.width)
        q, w, pool, tables, vis = make_inputs(rows, visible, args.width, args.heads, args.epb,
                                              "cuda")
        n_bytes = rows * visible * (HEAD_DIM // 2 + HEAD_DIM // 32) + rows * args.width * 4
        flops = rows * visible * args.heads * HEAD_DIM * 2
        roof_us = max(n_bytes / hbm, flops / bf16) * 1e6
        base = None
        for name in [v if v.startswith("gl") else f"v2 {v}" for v in variants]:
            set_kernel(indexer, name.split()[-1])

            def run(q=q, w=w, pool=pool, tables=tables, vis=vis):
                return indexer.index_scores_paged(q, w, pool, tables, vis, args.epb, args.width)
            try:
                out = run()
                torch.cuda.synchronize()
                us = rl.graph_us(run, args.calls)
            except Exception as e:  # noqa: BLE001 - a variant that fails is a row
                print(f"| {rows} | {context} | {name} | failed: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:120]} |", flush=True)
                continue
            base = out if base is None else base
            fin = torch.isfinite(base)
            same_inf = torch.equal(fin, torch.isfinite(out))
            diff = float((out - base)[fin].abs().max()) if same_inf and bool(fin.any()) else (
                0.0 if same_inf else float("inf"))
            print(f"| {rows} | {context} | {name} | {us:.1f} | {roof_us:.1f} | "
                  f"{roof_us / us:.2f} | {diff:.2e} |", flush=True)
        set_kernel(indexer, variants[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated rows:context")
    parser.add_argument("--ratio", type=int, default=1, help="compression ratio (visible = "
                        "context / ratio)")
    parser.add_argument("--width", type=int, default=65536, help="score row width (static)")
    parser.add_argument("--epb", type=int, default=64, help="index entries per pool block")
    parser.add_argument("--heads", type=int, default=32, help="index heads")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS,
                        help="comma-separated v2 BT:PROGRAMS:WARPS or gl[:PROGRAMS[:STAGES]] (the "
                        "Gluon kernel)")
    parser.add_argument("--calls", type=int, default=20, help="calls per CUDA graph")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter correctness check")
    args = parser.parse_args()
    from bench_common import smoke_or_gpu

    return smoke_or_gpu(args.smoke, smoke, lambda: bench(args))


if __name__ == "__main__":
    sys.exit(main())
