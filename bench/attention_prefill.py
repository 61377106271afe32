"""Prefill-shaped sparse attention (kernels/triton/attention.py) at several row-chunk sizes.

    TRITON_INTERPRET=0 python bench/attention_prefill.py [--queries 4096]   # GPU: the table
    python bench/attention_prefill.py --smoke                               # CPU interpreter

The slice plan's attention layer at prefill: N queries x 64 heads of 512 over one shared latent,
each query reading its 128-row window (528-B FP8 records) and 512 selected compressed entries
(288-B FP4 records), plus the sink. Variants: ``PREFILL_BLOCK_ROWS`` (rows per online-softmax
chunk of a prefill-sized launch, module constant; 16 ran until session 4 measured 64 faster).
Per variant: the median ms (CUDA events, 20 runs after 3 warm-ups), max |out - out(first)| (a
chunking change reorders fp32 sums only), the FLOPs (q.k and p.v, 2 x N x H x rows x D each)
and the fraction of the bf16 ceiling measured in the same run. A measurement for choosing the
prefill config, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HEADS, DIM, WINDOW, TOPK = 64, 512, 128, 512


def make_inputs(n: int, device: str, seed: int = 0) -> tuple:
    """q (N, H, D) bf16; window records (N + WINDOW, 528) and compressed records (N // 4 + 1,
    288) uint8 with finite values; per-query row lists (N, WINDOW), (N, TOPK); sink (H,)."""
    from deepinfer.kernels import formats

    g = torch.Generator(device="cpu").manual_seed(seed)
    q = (torch.randn(n, HEADS, DIM, generator=g) * 0.3).to(torch.bfloat16)
    rows_w, rows_c = n + WINDOW, n // 4 + 1
    codes = (torch.randn(rows_w, DIM, generator=g) * 0.5).to(torch.float8_e4m3fn).view(torch.uint8)
    scales = torch.full((rows_w, DIM // 32), 127, dtype=torch.uint8)  # ue8m0 1.0
    window = torch.cat([codes, scales], 1)
    nib = torch.randint(0, 256, (rows_c, DIM // 2), generator=g, dtype=torch.uint8)
    s4 = torch.full((rows_c, DIM // 16), 0x30, dtype=torch.uint8)  # e4m3 0.5
    comp = torch.cat([nib, s4], 1)
    assert window.shape[1] == formats.window_record_bytes(DIM)
    assert comp.shape[1] == formats.compressed_record_bytes(DIM)
    pos = torch.arange(n)[:, None]
    win_idx = pos + torch.arange(WINDOW)[None, :]  # query p: rows p .. p + WINDOW - 1
    comp_idx = torch.randint(0, rows_c, (n, TOPK), generator=g)
    sink = torch.randn(HEADS, generator=g)
    return tuple(t.to(device) for t in (q, window, win_idx, comp, comp_idx, sink))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=4096)
    ap.add_argument("--block-rows", default="16,32,64")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, 8 queries")
    args = ap.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from deepinfer.kernels.triton import attention

    device = "cpu" if args.smoke else "cuda"
    n = 8 if args.smoke else args.queries
    q, window, win_idx, comp, comp_idx, sink = make_inputs(n, device)
    if args.smoke:
        q = q.float()
    scale = DIM ** -0.5

    def run():
        return attention.sparse_attention_sink_records(q, window, win_idx, comp, comp_idx,
                                                       sink, scale)

    flops = 2 * 2 * n * HEADS * (WINDOW + TOPK) * DIM
    if not args.smoke:
        from roofline import measure_ceilings, median_ms

        bf16 = measure_ceilings()["bf16_flops_per_s"]
        print(f"{torch.cuda.get_device_name()}: bf16 ceiling {bf16 / 1e12:.0f} TFLOP/s; "
              f"N={n} H={HEADS} D={DIM} rows {WINDOW}+{TOPK}")
        print("| PREFILL_BLOCK_ROWS | ms | TFLOP/s | of bf16 ceiling | max abs diff vs first |")
    base = None
    for bk in [int(b) for b in args.block_rows.split(",")]:
        attention.PREFILL_BLOCK_ROWS = bk
        if args.smoke:
            attention.PREFILL_MIN_QUERIES = 1  # 8 queries take the prefill tiling too
        try:
            out = run().float()
        except Exception as e:  # a variant that does not compile (e.g. out of registers)
            print(f"| {bk} | failed: {type(e).__name__}: {str(e).splitlines()[0][:120]} |")
            continue
        base = out if base is None else base
        diff = (out - base).abs().max().item()
        if args.smoke:
            print(f"PREFILL_BLOCK_ROWS {bk}: finite {bool(torch.isfinite(out).all())}, "
                  f"max abs diff vs first {diff:.2e}")
            continue
        ms = median_ms(run)
        print(f"| {bk} | {ms:.3f} | {flops / ms / 1e9:.1f} | {flops / ms * 1e3 / bf16:.3f} "
              f"| {diff:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
