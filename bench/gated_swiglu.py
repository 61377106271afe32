"""The prefill's gated expert GEMM and SwiGLU at the slice's 4K shape, apart and fused: what
the fused epilogue (``moe_swiglu_epilogue``, ``moe_gluon_w4a16_prefill.FUSED_SWIGLU``) costs.

    TRITON_INTERPRET=0 python bench/gated_swiglu.py [--tokens 4096] [--experts 384]

384 MXFP4 experts of [2304, 5120] gate and up projections (random bytes, scale bytes 119..122),
the tokens' Q8_32 values routed top-6 uniformly at random, gathered as the pipeline gathers
them. Rows, median µs a call (CUDA events, 10 back-to-back calls): the two producer-warp GEMMs
(g, u), the slot-major SwiGLU (``swiglu_fake_q8_slots``), both (apart), the fused launch (the
engine's path: ``moe_swiglu_epilogue`` in its octet layout) at each ``--chunks`` value (tokens
an epilogue pass holds, ``moe_swiglu_epilogue.TOKEN_CHUNK``), compared bit for bit with
apart's, and the fused launch without its epilogue (``MODE`` 2: the K loop's own cost).
``--probe-no-decode``: every launch without its weights' integer decode (the words scaled as
they are: wrong values; the bit comparisons then read "—"): what the decode costs the fused
kernel (session 45's round 223 found the single GEMMs as fast without it). GPU only (Gluon
has no interpreter path).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

D, I, TOPK = 5120, 2304, 6  # data/deepseek-v4.1-flash/config.json


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--experts", type=int, default=384)
    ap.add_argument("--chunks", default="32",
                    help="comma-separated tokens per epilogue pass (moe_swiglu_epilogue."
                         "TOKEN_CHUNK: 32, 64 or 128)")
    ap.add_argument("--probe-no-decode", action="store_true",
                    help="a timing probe: the kernels without their integer decode (wrong "
                         "values)")
    args = ap.parse_args()
    if args.tokens < 1 or args.experts < 1:
        ap.error(f"--tokens and --experts: expected >= 1, got {args.tokens} and {args.experts}")
    try:
        chunks = [int(c) for c in args.chunks.split(",")]
    except ValueError:
        chunks = []
    if not chunks or any(c not in (32, 64, 128) for c in chunks):
        ap.error(f"--chunks: expected a comma-separated list of 32, 64, 128; got "
                 f"{args.chunks!r}")
    from roofline import median_ms

    from deepinfer.kernels.triton import moe_align, moe_gluon_w4a8, moe_swiglu, quant_act
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as ws
    from deepinfer.kernels.triton import moe_swiglu_epilogue as epilogue

    if args.probe_no_decode:  # before any compile (moe_gluon_w4a16_prefill._NO_DECODE)
        from triton.experimental.gluon import language as gl
        pf._NO_DECODE = gl.constexpr(True)
        print("PROBE: the kernels without their integer decode (wrong values)")
    torch.manual_seed(0)
    n, e = args.tokens, args.experts
    x = (torch.randn(n, D, device="cuda") * 0.5).to(torch.bfloat16)
    xq = quant_act.fake_quant_fp8_block32(x).to(torch.bfloat16)
    ids = torch.rand(n, e, device="cuda").topk(TOPK, dim=1).indices
    rw = torch.rand(n * TOPK, device="cuda")
    mats = []
    for _ in range(2):
        packed = torch.randint(0, 256, (e, I, D // 2), dtype=torch.uint8, device="cuda")
        mats.append((moe_gluon_w4a8.to_kernel_order(packed),
                     torch.randint(119, 123, (e, I, D // 32), dtype=torch.uint8,
                                   device="cuda")))
        del packed
    (w1, s1), (w3, s3) = mats
    block_m = pf.BLOCK_M
    pairs, blocks = moe_align.align_pairs(ids, e, block_m)
    num_pairs = n * TOPK
    xg = pf.gather_tokens(xq, pairs, num_pairs, TOPK)
    g = torch.empty((num_pairs, I), dtype=torch.bfloat16, device="cuda")
    u = torch.empty_like(g)
    hg = torch.zeros((pairs.numel(), I), dtype=torch.bfloat16, device="cuda")

    def gemms():
        ws.w4a16_prefill_ws_gemm(xg, w1, s1, pairs, blocks, num_pairs, g, block_m, True, 1,
                                 None, 2)
        ws.w4a16_prefill_ws_gemm(xg, w3, s3, pairs, blocks, num_pairs, u, block_m, True, 1,
                                 None, 2)

    def swiglu():
        moe_swiglu.swiglu_fake_q8_slots(g, u, rw, 10.0, torch.bfloat16, pairs, num_pairs,
                                        out=hg)

    def fused(out):
        ws.w4a16_gated_ws_gemm(xg, w1, s1, w3, s3, pairs, blocks, num_pairs, rw, 10.0, out,
                               block_m, True)

    gemms()
    swiglu()
    want = hg.clone()
    got = torch.zeros_like(hg)
    print(f"{torch.cuda.get_device_name()}: {n} tokens x top-{TOPK} of {e} experts, "
          f"[{I}, {D}] gate and up, BM {block_m}")
    print("| launch | µs a call | bits as apart |")
    print("|---|---:|---|")
    for name, fn in (("two GEMMs (g, u)", gemms), ("SwiGLU slots", swiglu),
                     ("apart (GEMMs + SwiGLU)", lambda: (gemms(), swiglu()))):
        print(f"| {name} | {median_ms(fn, calls=10) * 1e3:.1f} | — |", flush=True)
    saved, ok = (epilogue.MODE, epilogue.TOKEN_CHUNK), True
    forms = [(4, c, f"fused, chunk {c}") for c in chunks]
    forms.append((2, chunks[0], "fused, epilogue skipped (probe)"))
    try:
        for mode, chunk, name in forms:
            epilogue.MODE, epilogue.TOKEN_CHUNK = mode, chunk
            got.zero_()
            fused(got)
            same = "—" if mode == 2 or args.probe_no_decode else str(torch.equal(got, want))
            ok = ok and same != "False"
            us = median_ms(lambda: fused(got), calls=10) * 1e3
            print(f"| {name} | {us:.1f} | {same} |", flush=True)
    finally:
        epilogue.MODE, epilogue.TOKEN_CHUNK = saved
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
