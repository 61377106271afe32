"""One launch of a decode kernel between cudaProfilerStart/Stop, for Nsight Compute.

    ncu --clock-control none --profile-from-start off --section ... \
        python3 bench/ncu_probe.py experts --tokens 64
    python3 bench/ncu_probe.py attention --tokens 64 --context 4096

experts: ``run_experts`` (the gated and the down GEMM, the combine) at moe_config's decode tiling,
the shapes and random MXFP4 weights of bench/moe_decode.py; experts-w4a8: the same weights in
the W4A8 Gluon layout (the SM90 default: ``moe_gluon_w4a8.run_experts_w4a8``; above 10 pairs
per expert, e.g. --tokens 4096, the prefill pipeline ``run_experts_w4a16_prefill``); attention: the
decode-shaped sparse attention over records of bench/attention_decode.py; gemm-w4a16: one
gated prefill expert GEMM (w1, K 5120) on the engine's kernel (``moe_gluon_w4a16_prefill``, BM
128, 2 warpgroups, parts 4; session 27's round 150 also ran two shared-memory-operand kernels
here, at commit 0857b46). Each is run twice
first (compile, warm caches), then once under the profiler. Prints nothing but what it ran:
the figures are ncu's.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def experts_call(num_tokens: int, w4a8: bool = False):
    from moe_decode import EXPERTS, HIDDEN, INTER, TOPK, make_inputs, random_experts

    from deepinfer.kernels.triton import moe_experts

    torch.manual_seed(0)
    ws = random_experts(EXPERTS, HIDDEN, INTER, "cuda")
    if w4a8:  # the SM90 default layout: run_experts hands the call to the Gluon W4A8 pipeline
        ws = [moe_experts.mxfp4_to_w4a8_order(w) for w in ws]
    x, ids, route_w = make_inputs(num_tokens, HIDDEN, EXPERTS, TOPK, torch.bfloat16, "cuda")
    return lambda: moe_experts.run_experts(x, ids, route_w, *ws, 10.0)


def gemm_call(num_tokens: int):
    """One gated prefill expert GEMM of bench/moe_gluon_prefill.py's shapes (tokens gathered
    for BM 128)."""
    from moe_decode import EXPERTS, HIDDEN, INTER, TOPK, make_inputs, random_experts

    from deepinfer.kernels.reference.quant import dequant_fp8_ue8m0
    from deepinfer.kernels.triton import moe_align, moe_gluon_w4a8, quant_act
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf16

    torch.manual_seed(0)
    f = random_experts(EXPERTS, HIDDEN, INTER, "cuda")[0]
    w = moe_gluon_w4a8.to_kernel_order(f.data)
    one_mul = f.scale_max is not None and f.scale_max <= 128
    x, ids, _ = make_inputs(num_tokens, HIDDEN, EXPERTS, TOPK, torch.bfloat16, "cuda")
    codes, scales = quant_act.quant_q8_32(x)
    xv = dequant_fp8_ue8m0(codes.view(torch.float8_e4m3fn), scales)
    pairs, blocks = moe_align.align_pairs(ids, EXPERTS, 128)
    gathered = pf16.gather_tokens(xv.to(torch.bfloat16), pairs, ids.numel(), TOPK)
    out = torch.empty((ids.numel(), INTER), dtype=torch.float32, device="cuda")
    args = (gathered, w, f.scale, pairs, blocks, ids.numel(), out)
    return lambda: pf16.w4a16_prefill_gemm(*args, 128, one_mul=one_mul, warpgroups=2, parts=4)


def attention_call(num_queries: int, context: int):
    from attention_prefill import DIM, TOPK, make_inputs

    from deepinfer.kernels.triton import attention

    q, window, win_idx, comp, comp_idx, sink = make_inputs(
        num_queries, "cuda", compressed_rows=max(TOPK, context // 4))
    return lambda: attention.sparse_attention_sink_records(q, window, win_idx, comp, comp_idx,
                                                          sink, DIM ** -0.5)


def projection_call(num_rows: int, shape: str, variant: str):
    from gemm_decode import SHAPES, make_call, parse_variant

    from deepinfer.kernels.triton import gemm_fp8

    dims = {name: (k, n) for name, k, n in SHAPES}
    if shape not in dims:
        sys.exit(f"ncu_probe: --shape {shape!r} is not one of {sorted(dims)}")
    k, n = dims[shape]
    g = torch.Generator(device="cuda").manual_seed(3)
    w = gemm_fp8.pack_fp8_weight(torch.randn(n, k, generator=g, device="cuda") * 0.02)
    x = torch.randn(num_rows, k, generator=g, device="cuda").to(torch.bfloat16)
    return make_call(parse_variant(variant), x, w)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", choices=("experts", "experts-w4a8", "attention", "projection",
                                       "gemm-w4a16"))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--shape", default="wo_b", help="projection: a bench/gemm_decode.py shape")
    ap.add_argument("--variant", default="wm", help="projection: a bench/gemm_decode.py variant")
    args = ap.parse_args()
    if args.kernel == "gemm-w4a16":
        call = gemm_call(args.tokens)
    elif args.kernel == "projection":
        call = projection_call(args.tokens, args.shape, args.variant)
    elif args.kernel.startswith("experts"):
        call = experts_call(args.tokens, args.kernel == "experts-w4a8")
    else:
        call = attention_call(args.tokens, args.context)
    for _ in range(2):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"ran {args.kernel} at {args.tokens} tokens once under the profiler")
    return 0


if __name__ == "__main__":
    sys.exit(main())
