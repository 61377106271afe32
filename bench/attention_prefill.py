"""Prefill-shaped sparse attention (kernels/triton/attention.py) under several launch configs.

    TRITON_INTERPRET=0 python bench/attention_prefill.py [--queries 4096] [--variants ...]
    python bench/attention_prefill.py --smoke                               # CPU interpreter

The slice plan's attention layer at prefill: N queries x 64 heads of 512 over one shared latent,
each query reading its 128-row window and 512 selected compressed entries, plus the sink. Row
formats: ``float`` (what the engine's prefill runs: the chunk's window keys and the unpacked
entries as bf16 rows, ``sparse_attention_sink``) and ``records`` (528-B FP8 window records and
288-B FP4 entries, ``sparse_attention_sink_records``: the decode path's format).
A variant is ``FORMAT:LAYOUT:BK:BH:SPLIT:STAGES``. LAYOUT: ``h`` (float rows as contiguous
channel halves), ``i`` (interleaved pairs, as before session 5), or ``p`` (float rows on the
Gluon kernel ``attention_prefill_pairs``, the engine's prefill default; its numbers are
ignored). The numbers set the
Triton kernel's PREFILL_* constants (rows per online-softmax chunk, heads per program, output
split across programs, pipeline stages). Per variant: the median ms (CUDA events, 20 runs
after 3 warm-ups), max |out - out of the first variant of the same format| (a tiling change
reorders fp32 sums only), the FLOPs (q.k and p.v, 2 x N x H x rows x D each) and the fraction
of the bf16 ceiling measured in the same run. A measurement for choosing the prefill config,
not a test.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_args  # noqa: E402

HEADS, DIM, WINDOW, TOPK = 64, 512, 128, 512


def make_inputs(n: int, device: str, seed: int = 0, compressed_rows: int | None = None) -> tuple:
    """q (N, H, D) bf16; window records (N + WINDOW, 528) and compressed records
    (``compressed_rows``, default N // 4 + 1, 288) uint8 with finite values; per-query row lists
    (N, WINDOW), (N, TOPK); sink (H,)."""
    from deepinfer.kernels import formats

    g = torch.Generator(device="cpu").manual_seed(seed)
    q = (torch.randn(n, HEADS, DIM, generator=g) * 0.3).to(torch.bfloat16)
    rows_w, rows_c = n + WINDOW, compressed_rows or n // 4 + 1
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


DEFAULT_VARIANTS = ("float:h:32:64:1:2,float:p:64:64:1:2,float:i:64:64:2:2,float:h:64:64:2:1,"
                    "float:h:32:64:2:2,float:h:32:64:2:1,float:h:16:64:2:2,float:h:16:64:1:2,"
                    "float:h:64:32:2:1,float:h:32:32:1:2,records:i:64:64:2:2,"
                    "records:i:32:64:2:2")


def set_variant(attention, layout: str, bk: int, bh: int, split: int, stages: int) -> None:
    attention.FLOAT_HALVES = layout in ("h", "p")
    attention.PREFILL_KERNEL = "pairs" if layout == "p" else "triton"
    attention.PREFILL_BLOCK_ROWS, attention.PREFILL_BLOCK_HEADS = bk, bh
    attention.PREFILL_DV_SPLIT, attention.PREFILL_NUM_STAGES = split, stages


def main() -> int:
    args = sweep_args.parse(__doc__, DEFAULT_VARIANTS, "8 queries",
                            lambda ap: ap.add_argument("--queries", type=int, default=4096))
    from deepinfer.kernels import formats
    from deepinfer.kernels.triton import attention

    device = args.device
    n = 8 if args.smoke else args.queries
    q, window, win_idx, comp, comp_idx, sink = make_inputs(n, device)
    if args.smoke:
        q = q.float()
        attention.PREFILL_MIN_QUERIES = 1  # 8 queries take the prefill tiling too
    # the float rows the engine's prefill builds: window keys then the unpacked entries
    rows = torch.cat([formats.unpack_window_kv(window, DIM, q.dtype),
                      formats.unpack_compressed_kv(comp, DIM, q.dtype)])
    rows_idx = torch.cat([win_idx, comp_idx + window.shape[0]], 1)
    scale = DIM ** -0.5
    runs = {"float": lambda: attention.sparse_attention_sink(q, rows, rows_idx, sink, scale),
            "records": lambda: attention.sparse_attention_sink_records(
                q, window, win_idx, comp, comp_idx, sink, scale)}

    flops = 2 * 2 * n * HEADS * (WINDOW + TOPK) * DIM
    if not args.smoke:
        from roofline import measure_ceilings, median_ms

        bf16 = measure_ceilings()["bf16_flops_per_s"]
        print(f"{torch.cuda.get_device_name()}: bf16 ceiling {bf16 / 1e12:.0f} TFLOP/s; "
              f"N={n} H={HEADS} D={DIM} rows {WINDOW}+{TOPK}")
        print("| variant | ms | TFLOP/s | of bf16 ceiling | max abs diff vs first of format |")
        print("|---|---:|---:|---:|---:|")
    base: dict[str, torch.Tensor] = {}
    for variant in args.variants.split(","):
        fmt, layout, *nums = variant.split(":")
        set_variant(attention, layout, *map(int, nums))
        out = sweep_args.try_variant(variant, lambda: runs[fmt]().float())  # noqa: B023
        if out is None:
            continue
        first = base.setdefault(fmt, out)
        diff = (out - first).abs().max().item()
        if args.smoke:
            print(f"{variant}: finite {bool(torch.isfinite(out).all())}, "
                  f"max abs diff vs first {diff:.2e}")
            continue
        ms = median_ms(runs[fmt])
        print(f"| {variant} | {ms:.3f} | {flops / ms / 1e9:.1f} | {flops / ms * 1e3 / bf16:.3f} "
              f"| {diff:.2e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
