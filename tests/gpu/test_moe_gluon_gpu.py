"""The Gluon expert GEMMs on the GPU (kernels/triton/moe_gluon_w4a8.py, moe_gluon_w4a16_prefill*).

    TRITON_INTERPRET=0 python -m pytest -q -m gpu -s tests/gpu/test_moe_gluon_gpu.py

V4.1 expert shapes (gated: K = D = 5120 -> O = I = 2304; down: K = I -> O = D), 32 experts,
64 tokens x top-6 uniform routing, random MXFP4 weights with scale bytes 119..122 (<= 128: the
one-multiply contract), outputs NaN-poisoned before the launch. Error = ||out - ref|| / ||ref||
against ``moe_gluon.reference_grouped`` (dequantize, fp32 matmul per expert):
  bf16 kernels 1e-5: exact products, fp32 sums (only the order differs)
  W4A8 kernel  1e-3: the reference runs on the Q8_32 values of x; the in-group sums of 32
               products run in the FP8 tensor core's accumulator (~14 bits on Hopper) — round 39
               measured 2.3e-5 at 384 experts
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from tests.gpu.test_gemm_side_gpu import _ms, _rel, _row, nan_poisoned_allocations

pytestmark = pytest.mark.gpu

D, I, TOPK, EXPERTS, TOKENS = 5120, 2304, 6, 32, 64


@pytest.fixture(autouse=True)
def _gpu_only():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an SM90 GPU")


def _mxfp4(out_features: int, in_features: int):
    packed = torch.randint(0, 256, (EXPERTS, out_features, in_features // 2), dtype=torch.uint8,
                           device="cuda")
    scale = torch.randint(119, 123, (EXPERTS, out_features, in_features // 32),
                          dtype=torch.uint8, device="cuda")
    return packed, scale


def _case(gated: bool):
    torch.manual_seed(0)
    k, o = (D, I) if gated else (I, D)
    ids = torch.rand(TOKENS, EXPERTS, device="cuda").topk(TOPK, dim=1).indices
    rows = TOKENS if gated else TOKENS * TOPK
    x = (torch.randn(rows, k, device="cuda") * 0.5).to(torch.bfloat16)
    w = [_mxfp4(o, k) for _ in range(2 if gated else 1)]
    return ids, x, w, TOPK if gated else 1


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("block_m", [8, 16])
def test_w4a8_gluon(gated, block_m):
    """The W4A8 decode GEMM against the reference on the Q8_32 values; the down projection
    paired on the gated loop (two 64-row halves of a step tile a program)."""
    from deepinfer.kernels.reference.quant import dequant_fp8_ue8m0
    from deepinfer.kernels.triton import moe_align, moe_gluon, moe_gluon_w4a8, quant_act

    ids, x, w, div = _case(gated)
    codes, scales = quant_act.quant_q8_32(x)
    xv = dequant_fp8_ue8m0(codes.view(torch.float8_e4m3fn), scales)
    words = [moe_gluon_w4a8.to_kernel_order(p) for p, _ in w]
    pairs, blocks = moe_align.align_pairs(ids, EXPERTS, block_m)
    args = (words[0], w[0][1], words[1] if gated else None, w[1][1] if gated else None)
    with nan_poisoned_allocations():
        outs = moe_gluon_w4a8.w4a8_decode_gemm(codes, scales, *args, pairs, blocks, ids.numel(),
                                               div, block_m=block_m)
    for out, (p, s) in zip(outs, w, strict=False):
        ref = moe_gluon.reference_grouped(xv, p, s, ids.reshape(-1), div)
        _row(f"w4a8 gluon {'gated' if gated else 'down paired'} bm{block_m}",
             f"{TOKENS}x{x.shape[1]}", _rel(out, ref), 1e-3)


def test_w4a8_pipeline_matches_run_experts():
    """``run_experts_w4a8`` (Q8_32, align, gated, SwiGLU + Q8_32, down, combine) against the
    Triton ``run_experts`` (W4A16: exact products) on the same weights: 1e-2 (bf16 g/u/h/y
    roundings, one-step flips of h's codes, the FP8 accumulator)."""
    from deepinfer.kernels.triton import moe_experts, moe_gluon_w4a8

    torch.manual_seed(0)
    ids = torch.rand(TOKENS, EXPERTS, device="cuda").topk(TOPK, dim=1).indices
    route_w = torch.rand(TOKENS, TOPK, device="cuda")
    x = (torch.randn(TOKENS, D, device="cuda") * 0.5).to(torch.bfloat16)
    (p1, s1), (p3, s3), (p2, s2) = _mxfp4(I, D), _mxfp4(I, D), _mxfp4(D, I)

    def weights(p, s, order):
        data = (order(p) if order else p).view(torch.int8)
        # the flag routes run_experts to the W4A8 pipelines (the per-pair checks go through it)
        return moe_experts.ExpertWeights(data, s, "mxfp4", scale_max=int(s.max()),
                                         w4a8_order=order is not None)

    plain = [weights(p, s, None) for p, s in ((p1, s1), (p3, s3), (p2, s2))]
    kernel = [weights(p, s, moe_gluon_w4a8.to_kernel_order_gpu)
              for p, s in ((p1, s1), (p3, s3), (p2, s2))]
    ref = moe_experts.run_experts(x, ids, route_w, *plain, 10.0)
    with nan_poisoned_allocations():
        out = moe_gluon_w4a8.run_experts_w4a8(x, ids, route_w, *kernel, 10.0)
    _row("w4a8 gluon pipeline", f"{TOKENS} tokens top{TOPK}/{EXPERTS}", _rel(out, ref), 1e-2)
    # per-pair outputs (what expert_ffn's 1-expert calls take), through run_experts' dispatch
    ref_pairs = moe_experts.run_experts(x, ids, route_w, *plain, 10.0, combine=False)
    with nan_poisoned_allocations():
        pairs = moe_experts.run_experts(x, ids, route_w, *kernel, 10.0, combine=False)
    assert pairs.dtype == x.dtype and pairs.shape == ref_pairs.shape
    _row("w4a8 gluon pipeline per pair", f"{TOKENS} tokens top{TOPK}/{EXPERTS}",
         _rel(pairs, ref_pairs), 1e-2)


@contextlib.contextmanager
def _setting(module_name: str, attr: str, value):
    """``deepinfer.kernels.triton.<module_name>.<attr>`` set to ``value`` inside the block."""
    import importlib

    module = importlib.import_module(f"deepinfer.kernels.triton.{module_name}")
    saved = getattr(module, attr)
    setattr(module, attr, value)
    try:
        yield
    finally:
        setattr(module, attr, saved)


def _w4a16_kernel(name: str):
    """``moe_gluon_w4a16_prefill.KERNEL`` set to ``name`` inside the block."""
    return _setting("moe_gluon_w4a16_prefill", "KERNEL", name)


def _prefill_pipeline_case():
    """1,024 tokens x top-6 of 32 experts (~192 pairs per expert: prefill sizes), bf16 x,
    routing weights, and the three projections' MXFP4 stacks twice: checkpoint order (Triton's
    ``run_experts``, the reference) and the W4A8 kernel order (the flag routes ``run_experts``
    to the W4A8 pipelines). Returns (tokens, ids, route_w, x, plain, kernel)."""
    from deepinfer.kernels.triton import moe_experts, moe_gluon_w4a8

    torch.manual_seed(0)
    tokens = TOKENS * 16
    ids = torch.rand(tokens, EXPERTS, device="cuda").topk(TOPK, dim=1).indices
    route_w = torch.rand(tokens, TOPK, device="cuda")
    x = (torch.randn(tokens, D, device="cuda") * 0.5).to(torch.bfloat16)
    mats = [_mxfp4(I, D), _mxfp4(I, D), _mxfp4(D, I)]

    def weights(p, s, order):
        data = (order(p) if order else p).view(torch.int8)
        return moe_experts.ExpertWeights(data, s, "mxfp4", scale_max=int(s.max()),
                                         w4a8_order=order is not None)

    plain = [weights(p, s, None) for p, s in mats]
    kernel = [weights(p, s, moe_gluon_w4a8.to_kernel_order_gpu) for p, s in mats]
    return tokens, ids, route_w, x, plain, kernel


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("block_m,one_mul,scale_lo,warpgroups,parts,rep", [
    (64, True, 119, 1, 1, 1), (64, False, 119, 1, 2, 1), (128, True, 119, 1, 2, 1),
    (64, False, 126, 1, 1, 1), (128, True, 119, 2, 2, 1), (128, True, 119, 2, 1, 1),
    (128, True, 119, 2, 4, 1), (128, False, 126, 1, 4, 1), (64, True, 119, 1, 4, 1),
    (128, True, 119, 1, 4, 2), (128, False, 126, 1, 4, 2), (64, True, 119, 1, 4, 2)])
def test_w4a16_prefill_gluon(gated, block_m, one_mul, scale_lo, warpgroups, parts, rep):
    """The bf16 prefill kernel (weights decoded to bf16 in the wgmma A layout, tokens gathered
    in its K order) against the reference on the Q8_32 values, ~192 pairs per expert: exact
    products and fp32 sums, 1e-5. Scale bytes 119..128 (the
    one-multiply contract) or 126..135 (past it: the two-multiply decode). ``parts``: a block
    runs N = its parts of BM / parts that hold pairs; the routing is skewed (~35 to ~345 pairs
    per expert) so that the experts' last blocks take every one of the four quarter fills,
    which is checked. Padding token rows are left unwritten by the gather (NaN-poisoned)."""
    from deepinfer.kernels.triton import moe_gluon
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf

    c = _w4a16_prefill_case(gated, block_m, scale_lo)
    out = c["out"]
    pf.w4a16_prefill_gemm(c["gathered"], c["weights"], c["scale"], c["pairs"], c["blocks"],
                          c["num_pairs"], out, block_m, one_mul=one_mul, warpgroups=warpgroups,
                          parts=parts, rep=rep)
    ref = moe_gluon.reference_grouped(c["xv"], c["packed"], c["scale"], c["ids"], c["div"])
    _row(f"w4a16 prefill {'gated' if gated else 'down'} bm{block_m} wg{warpgroups}"
         f" parts{parts} rep{rep} {'one' if one_mul else 'two'}-mul s{scale_lo}",
         f"{c['num_pairs'] // TOPK}x{c['xv'].shape[1]}", _rel(out, ref), 1e-5)


def _eighths_ids(tokens: int, block_m: int) -> torch.Tensor:
    """(tokens, TOPK) expert ids whose experts' last blocks take every eighth fill of block_m
    (1 .. block_m pairs, checked) — counts set per expert, the pairs shuffled (a token may
    name an expert twice: the GEMM does not care)."""
    fills = torch.tensor([(e * 37) % block_m + 1 for e in range(EXPERTS)])
    counts = fills + block_m * (torch.arange(EXPERTS) % 2)
    counts[-1] += tokens * TOPK - int(counts.sum())  # the rest on the last expert
    assert counts[-1] > 0, counts
    last_fill = (counts - 1) % block_m + 1
    assert set((-(-last_fill * 8 // block_m)).tolist()) == set(range(1, 9)), last_fill
    ids = torch.repeat_interleave(torch.arange(EXPERTS), counts)
    gen = torch.Generator().manual_seed(3)
    return ids[torch.randperm(ids.numel(), generator=gen)].reshape(tokens, TOPK).cuda()


def _w4a16_prefill_case(gated: bool, block_m: int, scale_lo: int,
                        eighths: bool = False) -> dict:
    """Inputs of the prefill expert GEMM with skewed routing (~35 to ~345 pairs per expert:
    the experts' last blocks take all four quarter fills, checked; ``eighths``: routing whose
    last blocks take all eight eighth fills, ``_eighths_ids``), scale bytes scale_lo ..
    scale_lo + 9, the gathered tokens (padding rows NaN-poisoned) and a poisoned output."""
    from deepinfer.kernels.reference.quant import dequant_fp8_ue8m0
    from deepinfer.kernels.triton import moe_align, moe_gluon_w4a8, quant_act
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf

    torch.manual_seed(2)
    k, o = (D, I) if gated else (I, D)
    tokens = TOKENS * 16
    if eighths:
        ids = _eighths_ids(tokens, block_m)
    else:
        skew = torch.linspace(0.2, 2.0, EXPERTS, device="cuda")
        ids = (torch.rand(tokens, EXPERTS, device="cuda") ** (1 / skew)).topk(TOPK,
                                                                              dim=1).indices
        last_fill = (torch.bincount(ids.reshape(-1), minlength=EXPERTS) - 1) % block_m + 1
        assert set((-(-last_fill * 4 // block_m)).tolist()) == {1, 2, 3, 4}, last_fill
    div = TOPK if gated else 1
    x = (torch.randn(tokens * TOPK // div, k, device="cuda") * 0.5).to(torch.bfloat16)
    packed, _ = _mxfp4(o, k)
    scale = torch.randint(scale_lo, scale_lo + 10, (EXPERTS, o, k // 32), dtype=torch.uint8,
                          device="cuda")
    codes, scales = quant_act.quant_q8_32(x)
    xv = dequant_fp8_ue8m0(codes.view(torch.float8_e4m3fn), scales)
    pairs, blocks = moe_align.align_pairs(ids, EXPERTS, block_m)
    with nan_poisoned_allocations():
        gathered = pf.gather_tokens(xv.to(torch.bfloat16), pairs, ids.numel(), div)
        out = torch.empty((ids.numel(), o), dtype=torch.float32, device="cuda")
    return {"ids": ids.reshape(-1), "div": div, "xv": xv, "packed": packed, "scale": scale,
            "weights": moe_gluon_w4a8.to_kernel_order(packed), "pairs": pairs,
            "blocks": blocks, "num_pairs": ids.numel(), "gathered": gathered, "out": out}


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("block_m,one_mul,scale_lo,warpgroups,rep,stages", [
    (128, True, 119, 1, 2, 2), (128, False, 126, 1, 2, 2), (64, True, 119, 1, 2, 3),
    (128, True, 119, 2, 1, 2), (64, False, 126, 1, 1, 2), (128, True, 119, 2, 2, 3),
    (128, False, 126, 2, 2, 2)])
def test_w4a16_prefill_ws_gives_the_base_kernels_bits(gated, block_m, one_mul, scale_lo,
                                                      warpgroups, rep, stages):
    """The producer-warp kernel (``moe_gluon_w4a16_prefill_ws``) against the base kernel on
    the same inputs, parts 4 (every quarter fill): bit-identical outputs (the same decode and
    wgmmas in the same order), at its register cap and ring depths 2 / 3; two warpgroups of
    two A fragments (256 rows, two weight boxes a step) against the base kernel's 2 x 64."""
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as ws

    c = _w4a16_prefill_case(gated, block_m, scale_lo)
    args = (c["gathered"], c["weights"], c["scale"], c["pairs"], c["blocks"], c["num_pairs"])
    # the base kernel on two warpgroups of one fragment (its bits do not depend on the shape)
    want = pf.w4a16_prefill_gemm(*args, c["out"].clone(), block_m, one_mul=one_mul,
                                 warpgroups=2, parts=4, rep=1)
    got = ws.w4a16_prefill_ws_gemm(*args, c["out"], block_m, one_mul, warpgroups, 4, rep,
                                   stages)
    assert not got.isnan().any()  # every pair's row written
    assert torch.equal(got, want), (got - want).abs().max()


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("warpgroups,rep", [(1, 2), (2, 1)])
def test_w4a16_prefill_eighths_give_the_quarters_bits(gated, warpgroups, rep):
    """Parts 8 (a block at N = its used eighths of BM 128: 16, 32, 32 + 16, 64, 64 + 16, 64 +
    32 or all, ``part_tiles``; session 34) on both kernels against parts 4 on the base kernel,
    routing whose last blocks take every eighth fill: bit-identical outputs, every pair's row
    written (a token only reaches its own accumulator column), and the reference's values."""
    from deepinfer.kernels.triton import moe_gluon
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as ws

    c = _w4a16_prefill_case(gated, 128, 119, eighths=True)
    args = (c["gathered"], c["weights"], c["scale"], c["pairs"], c["blocks"], c["num_pairs"])
    want = pf.w4a16_prefill_gemm(*args, c["out"].clone(), 128, one_mul=True,
                                 warpgroups=warpgroups, parts=4, rep=rep)
    base = pf.w4a16_prefill_gemm(*args, torch.full_like(c["out"], float("nan")), 128,
                                 one_mul=True, warpgroups=warpgroups, parts=8, rep=rep)
    got = ws.w4a16_prefill_ws_gemm(*args, torch.full_like(c["out"], float("nan")), 128, True,
                                   warpgroups, 8, rep)
    for out in (base, got):
        assert not out.isnan().any()  # every pair's row written
        assert torch.equal(out, want), (out - want).abs().max()
    ref = moe_gluon.reference_grouped(c["xv"], c["packed"], c["scale"], c["ids"], c["div"])
    _row(f"w4a16 prefill eighths {'gated' if gated else 'down'} wg{warpgroups} rep{rep}",
         f"{c['num_pairs'] // TOPK}x{c['xv'].shape[1]}", _rel(base, ref), 1e-5)


@pytest.mark.parametrize("block_m,eighths,parts", [(128, True, 8), (128, False, 4),
                                                    (64, False, 4)])
def test_w4a16_gated_swiglu_epilogue_matches_two_gemms(block_m, eighths, parts):
    """The gated GEMM with the SwiGLU as its epilogue (``w4a16_gated_ws_gemm``: gate and up
    of 64 features in one program) against the two producer-warp GEMMs and
    ``swiglu_fake_q8_slots``: bit for bit on every slot, padding slots untouched, at every
    part fill (eighths from BM 128, or the quarters), the clamps at the limit exercised (the
    epilogue in its octet layout, ``moe_swiglu_epilogue``)."""
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as ws
    from deepinfer.kernels.triton import moe_swiglu

    c, w3, s3, rw, gemm, sentinel, want = _gated_swiglu_case(block_m, eighths, parts)
    num_pairs, pairs, blocks = c["num_pairs"], c["pairs"], c["blocks"]
    got = ws.w4a16_gated_ws_gemm(c["gathered"], c["weights"], c["scale"], w3, s3, pairs, blocks,
                                 num_pairs, rw, 10.0, sentinel.clone(), block_m, True, parts)
    assert torch.equal(got, want), (got.float() - want.float()).abs().max()
    g, u = gemm(c["weights"], c["scale"]), gemm(w3, s3)
    apart = _ms(lambda: (gemm(c["weights"], c["scale"]), gemm(w3, s3),
                         moe_swiglu.swiglu_fake_q8_slots(g, u, rw, 10.0, torch.bfloat16, pairs,
                                                         num_pairs)))
    fused = _ms(lambda: ws.w4a16_gated_ws_gemm(c["gathered"], c["weights"], c["scale"], w3, s3,
                                               pairs, blocks, num_pairs, rw, 10.0,
                                               sentinel.clone(), block_m, True, parts))
    print(f"\n| w4a16 gated + swiglu bm{block_m} parts{parts} | apart "
          f"{apart * 1e3:.1f} us | "
          f"fused {fused * 1e3:.1f} us |", end="")


def _gated_swiglu_case(block_m, eighths, parts):
    """The gated SwiGLU checks' inputs: the prefill case (gate weights), up weights w3 / s3,
    routing weights, the producer-warp GEMM ``gemm(w, s)`` (g or u), an all-7 sentinel output
    and the two GEMMs + ``swiglu_fake_q8_slots`` result written over it (the clamps at the
    limit 10 exercised)."""
    from deepinfer.kernels.triton import moe_gluon_w4a8, moe_swiglu
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as ws

    c = _w4a16_prefill_case(True, block_m, 119, eighths=eighths)
    packed3, _ = _mxfp4(I, D)
    w3 = moe_gluon_w4a8.to_kernel_order(packed3)
    s3 = torch.randint(119, 129, c["scale"].shape, dtype=torch.uint8, device="cuda")
    num_pairs, pairs, blocks = c["num_pairs"], c["pairs"], c["blocks"]
    rw = torch.rand(num_pairs, device="cuda")

    def gemm(w, s):
        out = torch.empty((num_pairs, I), dtype=torch.bfloat16, device="cuda")
        return ws.w4a16_prefill_ws_gemm(c["gathered"], w, s, pairs, blocks, num_pairs, out,
                                        block_m, True, 1, parts, 2)

    g, u = gemm(c["weights"], c["scale"]), gemm(w3, s3)
    assert (g.float() > 10).any() and (u.float().abs() > 10).any()  # the clamps bite
    sentinel = torch.full((pairs.numel(), I), 7.0, dtype=torch.bfloat16, device="cuda")
    want = moe_swiglu.swiglu_fake_q8_slots(g, u, rw, 10.0, torch.bfloat16, pairs, num_pairs,
                                           out=sentinel.clone())
    return c, w3, s3, rw, gemm, sentinel, want


def test_w4a16_prefill_pipeline_fused_swiglu_same_bits(monkeypatch):
    """The pipeline with the gated GEMM's SwiGLU as its epilogue (``FUSED_SWIGLU``, the
    epilogue's default layout) gives the two GEMMs + SwiGLU's output bit for bit."""
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf

    tokens, ids, route_w, x, plain, kernel = _prefill_pipeline_case()
    monkeypatch.setattr(pf, "FUSED_SWIGLU", False)
    apart = pf.run_experts_w4a16_prefill(x, ids, route_w, *kernel, 10.0)
    monkeypatch.setattr(pf, "FUSED_SWIGLU", True)
    with nan_poisoned_allocations():
        fused = pf.run_experts_w4a16_prefill(x, ids, route_w, *kernel, 10.0)
    assert torch.equal(fused, apart), (fused.float() - apart.float()).abs().max()


def test_w4a16_prefill_pipeline_matches_run_experts():
    """``run_experts_w4a16_prefill`` against the Triton ``run_experts`` (W4A16, checkpoint
    order) on the same weights at 1,024 tokens, and the dispatch: ``run_experts`` on W4A8-order
    stacks takes it at prefill sizes (same output)."""
    from deepinfer.kernels.triton import moe_experts
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf

    tokens, ids, route_w, x, plain, kernel = _prefill_pipeline_case()
    ref = moe_experts.run_experts(x, ids, route_w, *plain, 10.0)
    for block_m in (64, 128):
        with nan_poisoned_allocations():
            out = pf.run_experts_w4a16_prefill(x, ids, route_w, *kernel, 10.0, block_m=block_m)
        _row(f"w4a16 prefill pipeline bm{block_m}", f"{tokens} tokens top{TOPK}/{EXPERTS}",
             _rel(out, ref), 1e-2)
    # one warpgroup of two A fragments (rep 2) against one of one: the same bits
    with _w4a16_kernel("base"):
        by_rep = [pf.run_experts_w4a16_prefill(x, ids, route_w, *kernel, 10.0, rep=rep)
                  for rep in (1, 2)]
    assert torch.equal(by_rep[0], by_rep[1])
    # the producer-warp kernel (``KERNEL`` "ws", and "auto": ws for REP 2), both program
    # shapes: the same bits
    for name in ("ws", "auto"):
        for rep in (1, 2):
            with _w4a16_kernel(name):
                assert torch.equal(pf.run_experts_w4a16_prefill(x, ids, route_w, *kernel, 10.0,
                                                                rep=rep), by_rep[0])
    via = moe_experts.run_experts(x, ids, route_w, *kernel, 10.0)
    via_pairs = moe_experts.run_experts(x, ids, route_w, *kernel, 10.0, combine=False)
    direct = pf.run_experts_w4a16_prefill(x, ids, route_w, *kernel, 10.0)
    assert torch.equal(via, direct)
    # the site's Q8_32 values rounded once (x_rounded: no rounding launch): the same bits
    from deepinfer.kernels.triton import quant_act

    xq = quant_act.fake_quant_fp8_block32(x)
    assert torch.equal(pf.run_experts_w4a16_prefill(xq, ids, route_w, *kernel, 10.0,
                                                    x_rounded=True), direct)
    assert torch.equal(moe_experts.moe_routed_experts(xq, ids, route_w, *kernel, 10.0,
                                                      x_rounded=True), direct)
    ref_pairs = moe_experts.run_experts(x, ids, route_w, *plain, 10.0, combine=False)
    assert via_pairs.dtype == x.dtype and via_pairs.shape == ref_pairs.shape
    _row("w4a16 prefill pipeline per pair", f"{tokens} tokens top{TOPK}/{EXPERTS}",
         _rel(via_pairs, ref_pairs), 1e-2)


@pytest.mark.parametrize("tokens,block_m", [(1024, 64), (4096, 128), (8192, 128)])
def test_swiglu_slots_equal_swiglu_then_gather_gpu(tokens, block_m):
    """The pipeline's one-launch SwiGLU into the down GEMM's token order
    (``moe_swiglu.swiglu_fake_q8_slots``) against the two launches it replaced
    (``swiglu_fake_q8`` then ``gather_tokens``), compiled: bit for bit on every slot, padding
    slots untouched, at the engine's prefill sizes (the chunked align path at 4K / 8K)."""
    from deepinfer.kernels.triton import moe_align, moe_swiglu
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill as pf

    gen = torch.Generator(device="cuda").manual_seed(tokens)
    ids = torch.randint(0, 384, (tokens, TOPK), device="cuda", generator=gen)
    num_pairs = tokens * TOPK
    g, u = ((torch.randn(num_pairs, I, device="cuda", generator=gen) * 6).to(torch.bfloat16)
            for _ in range(2))
    rw = torch.rand(num_pairs, device="cuda", generator=gen)
    pairs, _ = moe_align.align_pairs(ids, 384, block_m)
    sentinel = torch.full((pairs.numel(), I), 7.0, dtype=torch.bfloat16, device="cuda")
    h = moe_swiglu.swiglu_fake_q8(g, u, rw, 10.0, torch.bfloat16)
    want = pf.gather_tokens(h, pairs, num_pairs, 1, out=sentinel.clone())
    got = moe_swiglu.swiglu_fake_q8_slots(g, u, rw, 10.0, torch.bfloat16, pairs, num_pairs,
                                          out=sentinel.clone())
    assert torch.equal(got, want)




@pytest.mark.parametrize("block_m,warpgroups,rep,parts", [
    (128, 1, 2, 8), (128, 1, 2, 4), (128, 2, 1, 4), (128, 2, 2, 4), (64, 1, 2, 4),
    (64, 1, 1, 2)])
def test_w4a16_prefill_ws_row_stores_give_the_same_bits(monkeypatch, block_m, warpgroups, rep,
                                                         parts):
    """``ROW_STORES`` (the down GEMM's output converted to 16-byte stores) on the producer-warp
    kernel: every pair's row written and the wgmma-layout stores' bits, at each part fill
    (bf16 and fp32 outputs), at BM 128 (where the launch applies it) and 64 (the check that
    would let it)."""
    from deepinfer.kernels.triton import moe_gluon_w4a16_prefill_ws as ws

    c = _w4a16_prefill_case(False, block_m, 119, eighths=parts == 8)
    args = (c["gathered"], c["weights"], c["scale"], c["pairs"], c["blocks"], c["num_pairs"])
    monkeypatch.setattr(ws, "ROW_STORES_BLOCK_M", (64, 128))
    for dtype in (torch.float32, torch.bfloat16):
        nan = torch.full(c["out"].shape, float("nan"), dtype=dtype, device="cuda")
        monkeypatch.setattr(ws, "ROW_STORES", 0)
        want = ws.w4a16_prefill_ws_gemm(*args, nan.clone(), block_m, True, warpgroups, parts,
                                        rep)
        monkeypatch.setattr(ws, "ROW_STORES", 1)
        got = ws.w4a16_prefill_ws_gemm(*args, nan.clone(), block_m, True, warpgroups, parts,
                                       rep)
        assert not got.isnan().any()
        assert torch.equal(got, want), (dtype, (got.float() - want.float()).abs().max())
