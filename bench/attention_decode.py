"""Decode-shaped sparse attention (kernels/triton/attention.py, records) under launch configs.

    TRITON_INTERPRET=0 python bench/attention_decode.py [--queries 64] [--context 4096]
    python bench/attention_decode.py --smoke                                # CPU interpreter

The slice plan's attention layer in a decode step: N queries (one per sequence) x 64 heads of
512 over one shared latent, each reading its 128 window records (528 B, FP8) and 512 selected
compressed records (288 B, FP4) of a ``context``-token sequence (context / 4 entries), plus the
sink. A variant is ``BK:BH:DV:STAGES:WARPS`` — the module's decode constants: rows per
online-softmax chunk, heads per program, output split across programs, pipeline stages and
warps. ``v2`` or ``v2:BK:BH:WARPS:STAGES`` runs the decode kernel v2
(kernels/triton/attention_decode.py, ``attention.DECODE_KERNEL = "v2"``) at its defaults or at
these values; e.g. ``--variants v2,16:64:2:2:8`` times v2 against v1 in one run. (The row
splits' field SPLITS went with them: slower in rounds 17 and 25, code at bf55292.) The
others are compared with the first variant (by default v2, the module's default). Per variant:
the median ms (CUDA events), max |out - out of the first variant| (fp32 sums reordered only),
the bytes the rows take (each record read once) against the HBM ceiling measured in the same
run. A measurement for choosing the decode config, not a test.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_args  # noqa: E402
from attention_prefill import DIM, HEADS, TOPK, WINDOW, make_inputs  # noqa: E402

# the default (v2) first, with 32-row chunks and 2 stages; then v1 (the default until session
# 8), output splits of 4 and 1, 32-row chunks, 4 warps, 32 heads
DEFAULT_VARIANTS = ("v2,v2:32:64:8:1,v2:64:64:8:2,16:64:2:2:8,16:64:4:2:8,16:64:1:2:8,"
                    "32:64:2:2:8,16:64:2:2:4,16:32:2:2:4")


V2_DEFAULTS = {}  # attention_decode's constants as imported, restored by a bare "v2"


def set_variant(attention, variant: str) -> None:
    """Set the decode constants of v1 (``BK:BH:DV:STAGES:WARPS``) or v2 (``v2`` or
    ``v2:BK:BH:WARPS:STAGES``) and ``attention.DECODE_KERNEL`` accordingly."""
    from deepinfer.kernels.triton import attention_decode as v2

    names = ("BLOCK_ROWS", "BLOCK_HEADS", "NUM_WARPS", "NUM_STAGES")
    if not V2_DEFAULTS:
        V2_DEFAULTS.update({k: getattr(v2, k) for k in names})
    if variant.split(":")[0] == "v2":
        attention.DECODE_KERNEL = "v2"
        values = dict(V2_DEFAULTS)
        fields = variant.split(":")[1:]
        for name, field in zip(names[:len(fields)], fields, strict=True):
            values[name] = int(field)
        for name, value in values.items():
            setattr(v2, name, value)
        return
    bk, bh, dv, stages, warps = map(int, variant.split(":"))
    attention.DECODE_KERNEL = "v1"
    attention.BLOCK_ROWS, attention.BLOCK_HEADS, attention.DV_SPLIT = bk, bh, dv
    attention.NUM_STAGES, attention.NUM_WARPS = stages, warps


def main() -> int:
    def shapes(ap):
        ap.add_argument("--queries", type=int, default=64)
        ap.add_argument("--context", type=int, default=4096)

    args = sweep_args.parse(__doc__, DEFAULT_VARIANTS, "4 queries", shapes)
    from deepinfer.kernels.triton import attention

    n = 4 if args.smoke else args.queries
    q, window, win_idx, comp, comp_idx, sink = make_inputs(
        n, args.device, compressed_rows=max(TOPK, args.context // 4))
    if args.smoke:
        q = q.float()
    scale = DIM ** -0.5
    assert n <= attention.PREFILL_MIN_QUERIES, "decode-sized launches only"

    def run():
        return attention.sparse_attention_sink_records(q, window, win_idx, comp, comp_idx, sink,
                                                      scale)

    n_bytes = n * (WINDOW * window.shape[1] + TOPK * comp.shape[1])
    if not args.smoke:
        from roofline import measure_ceilings, median_ms

        hbm = measure_ceilings()["hbm_bytes_per_s"]
        print(f"{torch.cuda.get_device_name()}: HBM ceiling {hbm / 1e12:.2f} TB/s; N={n} H={HEADS} "
              f"D={DIM} rows {WINDOW}+{TOPK} of a {args.context}-token context")
        print("| variant BK:BH:DV:STAGES:WARPS | ms | GB/s of rows | of HBM | "
              "max abs diff vs first |")
        print("|---|---:|---:|---:|---:|")
    first = None
    for variant in args.variants.split(","):
        set_variant(attention, variant)
        out = sweep_args.try_variant(variant, lambda: run().float())
        if out is None:
            continue
        first = out if first is None else first
        diff = (out - first).abs().max().item()
        if args.smoke:
            print(f"{variant}: finite {bool(torch.isfinite(out).all())}, "
                  f"max abs diff vs first {diff:.2e}")
            continue
        ms = median_ms(run)
        print(f"| {variant} | {ms:.3f} | {n_bytes / ms / 1e6:.0f} | {n_bytes / ms * 1e3 / hbm:.3f} "
              f"| {diff:.2e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
