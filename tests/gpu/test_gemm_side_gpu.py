"""GEMM-side Triton kernels on the GPU at V4.1-Flash shapes: error vs the torch reference + speed.

Run on the H200 with the interpreter OFF (tests/conftest.py defaults it on):
    TRITON_INTERPRET=0 python -m pytest -q -m gpu -s tests/gpu/test_gemm_side_gpu.py

Every kernel gets fresh random inputs at real shapes; every buffer its wrapper allocates is
NaN-poisoned first (float buffers NaN, uint8 buffers 0xFF = NaN in e4m3 and in ue8m0, integer
buffers -1), so an element
the kernel fails to write shows up as NaN/garbage in the error. Error = ‖out − ref‖ / ‖ref‖ (fp64).
Tolerances follow the output dtype: the kernels' products and scales are exact and accumulate in
fp32, so the dominant term is the final bf16 rounding (relative 2^-9 per element, ~2e-3 in norm):
  quantizer        bitwise (0 mismatching bytes)
  FP8 GEMM         5e-3  (bf16 output)
  MoE              1e-2  (bf16 g/u/h/y roundings; a rounding flip can move one Q8_32 code of h)
  router           ids: <= 0.2% of (token, slot) entries differ (fp32 vs fp64 logits, approximate
                   exp/log on near-ties); weights 1e-4 on rows whose ids agree
  mHC coeffs       abs 1e-4 for both dots (bf16x3: bf16 x times an exact 3-part bf16 split of
                   fn; tf32x3: 3xTF32 ~ fp32), fp32 accumulation, 20 Sinkhorn rounds
  collapse/expand, engram, RMSNorm: 5e-3 (bf16 output)
A table (kernel, shape, error, tolerance, time, TFLOP/s) is printed per test.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

pytestmark = pytest.mark.gpu

triton = pytest.importorskip("triton")

V41_HIDDEN, V41_INTER, V41_EXPERTS, V41_TOPK, V41_HC = 5120, 2304, 384, 6, 4
DECODE_TOKENS, PREFILL_TOKENS = 64, 4096


@pytest.fixture(autouse=True)
def _gpu_only():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from deepinfer.kernels.triton.gemm_fp8 import is_interpreting

    if is_interpreting():
        pytest.skip("TRITON_INTERPRET is on: run with TRITON_INTERPRET=0 to test the GPU kernels")
    torch.manual_seed(0)


@contextlib.contextmanager
def nan_poisoned_allocations():
    """Make torch.empty/empty_like return poisoned memory while a kernel wrapper runs."""
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def poison(t: torch.Tensor) -> torch.Tensor:
        if t.dtype.is_floating_point:
            t.fill_(float("nan"))
        elif t.dtype == torch.uint8:
            t.fill_(0xFF)
        elif t.dtype != torch.bool:
            t.fill_(-1)  # integer outputs (ids): never a valid value here
        return t

    torch.empty = lambda *a, **k: poison(real_empty(*a, **k))
    torch.empty_like = lambda *a, **k: poison(real_empty_like(*a, **k))
    try:
        yield
    finally:
        torch.empty, torch.empty_like = real_empty, real_empty_like


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if torch.isnan(out).any():
        return float("nan")
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=5, rep=50)


def _row(name: str, shape: str, err: float, tol: float, ms: float | None = None,
         flops: float | None = None) -> None:
    tflops = f"{flops / (ms * 1e-3) / 1e12:8.1f}" if (ms and flops) else "       -"
    time_us = f"{ms * 1e3:9.1f}" if ms else "        -"
    print(f"\n| {name:<28} | {shape:<28} | err {err:9.2e} | tol {tol:7.1e} | {time_us} us |"
          f" {tflops} TFLOP/s |", end="")
    assert err == err and err <= tol, f"{name} {shape}: error {err} > {tol}"


def _random_fp8_weight(out_features: int, in_features: int):
    from deepinfer.kernels.triton.gemm_fp8 import Fp8BlockWeight

    codes = (torch.randn(out_features, in_features, device="cuda") * 64).clamp(-448, 448)
    codes = codes.to(torch.float8_e4m3fn)
    tiles = (triton.cdiv(out_features, 32), triton.cdiv(in_features, 32))
    scale = torch.randint(118, 122, tiles, dtype=torch.uint8, device="cuda")  # ~2^-8 .. 2^-5
    return Fp8BlockWeight(codes, scale)


def test_quant_q8_32_gpu():
    from deepinfer.kernels.reference import quant
    from deepinfer.kernels.triton import quant_act

    x = torch.randn(PREFILL_TOKENS, V41_HIDDEN, device="cuda", dtype=torch.bfloat16) * 3
    with nan_poisoned_allocations():
        codes, scale_exp = quant_act.quant_q8_32(x)
    ref_codes, ref_exp = quant.quant_fp8_ue8m0(x, 32)
    bad = int((codes != ref_codes.view(torch.uint8)).sum()) + int((scale_exp != ref_exp).sum())
    ms = _ms(lambda: quant_act.quant_q8_32(x))
    _row("quant_q8_32 (mismatches)", f"{PREFILL_TOKENS}x{V41_HIDDEN} bf16", bad, 0, ms)


@pytest.mark.parametrize("out_features,in_features", [(V41_INTER, V41_HIDDEN),
                                                      (V41_HIDDEN, V41_INTER),
                                                      (1280, V41_HIDDEN), (4096, 4096)])
@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, PREFILL_TOKENS])
def test_linear_quant_act_gpu(num_tokens, out_features, in_features):
    from deepinfer.kernels.reference import linear
    from deepinfer.kernels.triton import gemm_fp8

    x = torch.randn(num_tokens, in_features, device="cuda", dtype=torch.bfloat16)
    w = _random_fp8_weight(out_features, in_features)
    with nan_poisoned_allocations():
        out = gemm_fp8.linear_quant_act(x, w)
    ref = linear.linear_quant_act(x, w.dequantize().to(torch.bfloat16))
    flops = 2.0 * num_tokens * out_features * in_features
    shape = f"M{num_tokens} N{out_features} K{in_features}"
    _row("linear_quant_act fp8 w", shape, _rel(out, ref), 5e-3,
         _ms(lambda: gemm_fp8.linear_quant_act(x, w)), flops)
    from deepinfer.kernels.triton import linear as tri_linear  # the registered op: routes by rows

    with nan_poisoned_allocations():
        out_routed = tri_linear.linear_quant_act(x, w)
    _row("linear_quant_act registered", shape, _rel(out_routed, ref), 5e-3,
         _ms(lambda: tri_linear.linear_quant_act(x, w)), flops)
    w_bf16 = w.dequantize().to(torch.bfloat16)
    with nan_poisoned_allocations():
        out_plain = gemm_fp8.linear_quant_act(x, w_bf16)
    _row("linear_quant_act bf16 w", shape, _rel(out_plain, ref), 5e-3,
         _ms(lambda: gemm_fp8.linear_quant_act(x, w_bf16)), flops)
    a_codes, a_scale = gemm_fp8.quant_act.quant_q8_32(x)
    _row("  gemm only (fp8 w)", shape, 0.0, 1.0,
         _ms(lambda: gemm_fp8.gemm_q8(a_codes, a_scale, w, torch.bfloat16)), flops)
    if num_tokens <= 64:  # what decode split-K buys (auto above vs forced off here)
        with nan_poisoned_allocations():
            no_split = gemm_fp8.gemm_q8(a_codes, a_scale, w, torch.bfloat16, split_k=1)
        _row("  gemm only, split_k=1", shape, _rel(no_split, ref), 5e-3,
             _ms(lambda: gemm_fp8.gemm_q8(a_codes, a_scale, w, torch.bfloat16, split_k=1)), flops)


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, 256, PREFILL_TOKENS])  # each tile class
def test_route_gpu(num_tokens):
    from deepinfer.kernels.reference import moe
    from deepinfer.kernels.triton import moe_routing

    x = torch.randn(num_tokens, V41_HIDDEN, device="cuda", dtype=torch.bfloat16)
    gate = (torch.randn(V41_EXPERTS, V41_HIDDEN, device="cuda") * 0.02).to(torch.bfloat16)
    bias = torch.randn(V41_EXPERTS, device="cuda") * 0.1
    bias_vl = torch.randn(V41_EXPERTS, device="cuda") * 0.1
    image_mask = torch.rand(num_tokens, device="cuda") > 0.8
    args = (x, gate, bias, bias_vl, image_mask, V41_TOPK, 1.5, 1.0, True)
    with nan_poisoned_allocations():
        w, ids = moe_routing.route_sqrtsoftplus(*args)
    ref_w, ref_ids = moe.route_sqrtsoftplus(*args)
    bad = (ids != ref_ids).float().mean().item()
    same = (ids == ref_ids).all(dim=1)
    ms = _ms(lambda: moe_routing.route_sqrtsoftplus(*args))
    shape = f"N{num_tokens} D{V41_HIDDEN} E{V41_EXPERTS}"
    # fp32 against fp64 logits: a near-tie may flip; at small N one flipped entry is allowed
    _row("route ids (mismatch frac)", shape, bad, max(2e-3, 1.0 / ids.numel()), ms,
         2.0 * num_tokens * V41_HIDDEN * V41_EXPERTS)
    _row("route weights", shape, _rel(w[same], ref_w[same]), 1e-4)


def _random_mxfp4_experts(num_experts: int, out_features: int, in_features: int):
    from deepinfer.kernels.triton.moe_experts import ExpertWeights

    data = torch.randint(0, 256, (num_experts, out_features, in_features // 2), dtype=torch.uint8,
                         device="cuda")
    scale = torch.randint(119, 123, (num_experts, out_features, in_features // 32),
                          dtype=torch.uint8, device="cuda")
    return ExpertWeights(data.view(torch.int8), scale, "mxfp4")


def _dequant_experts(w) -> torch.Tensor:
    from deepinfer.kernels import formats

    return torch.stack([formats.dequantize_fp4_weight(w.data[e], w.scale[e]).to(torch.bfloat16)
                        for e in range(w.data.shape[0])])


@pytest.fixture(scope="module")
def v41_experts():
    w1 = _random_mxfp4_experts(V41_EXPERTS, V41_INTER, V41_HIDDEN)
    w3 = _random_mxfp4_experts(V41_EXPERTS, V41_INTER, V41_HIDDEN)
    w2 = _random_mxfp4_experts(V41_EXPERTS, V41_HIDDEN, V41_INTER)
    return w1, w3, w2


def _routing(num_tokens: int, num_experts: int = V41_EXPERTS):
    scores = torch.rand(num_tokens, num_experts, device="cuda")
    ids = scores.topk(V41_TOPK, dim=1).indices
    weights = torch.rand(num_tokens, V41_TOPK, device="cuda")
    return ids, weights / weights.sum(1, keepdim=True) * 1.5


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, 512])
def test_moe_experts_accuracy_gpu(num_tokens):
    """Real D and I; 16 experts so that the CPU reference (its accumulator is a CPU tensor) and
    its dequantized weights stay small."""
    from deepinfer.kernels.reference import moe
    from deepinfer.kernels.triton import moe_experts

    num_experts = 16
    w1 = _random_mxfp4_experts(num_experts, V41_INTER, V41_HIDDEN)
    w3 = _random_mxfp4_experts(num_experts, V41_INTER, V41_HIDDEN)
    w2 = _random_mxfp4_experts(num_experts, V41_HIDDEN, V41_INTER)
    x = torch.randn(num_tokens, V41_HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.5
    ids, weights = _routing(num_tokens, num_experts)
    ref = moe.moe_routed_experts(x.cpu(), ids.cpu(), weights.cpu(), _dequant_experts(w1).cpu(),
                                 _dequant_experts(w3).cpu(), _dequant_experts(w2).cpu(), 10.0)
    fp8 = [moe_experts.mxfp4_to_fp8(w) for w in (w1, w3, w2)]
    for name, ws, mma, cfg in (("moe mxfp4 W4A8 (fp8 mma)", (w1, w3, w2), "fp8", None),
                               ("moe mxfp4 W4A16 (bf16 mma)", (w1, w3, w2), "bf16", None),
                               ("moe mxfp4 W4A16 A_BF16", (w1, w3, w2), "bf16",
                                {"A_BF16": True}),
                               ("moe fp8-reencoded", fp8, "fp8", None)):
        with nan_poisoned_allocations():
            out = moe_experts.run_experts(x, ids, weights, *ws, 10.0, mma=mma, config=cfg)
        _row(name, f"N{num_tokens} top{V41_TOPK}/{num_experts}", _rel(out.cpu(), ref), 1e-2)


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, 512])
def test_moe_one_mul_matches_two_mul_gpu(num_tokens):
    """W_ONE_MUL (one bf16x2 multiply per weight pair, 2^(e - 1) scales) builds the same bf16
    weights as the two-multiply unpack, so the outputs are bit-identical — on tiles whose scale
    bytes are all <= 128 (the fast loop) and on experts given bytes up to 200 (the programs that
    fall back); and both match the CPU reference."""
    from deepinfer.kernels.reference import moe
    from deepinfer.kernels.triton import moe_experts

    num_experts = 16
    w1 = _random_mxfp4_experts(num_experts, V41_INTER, V41_HIDDEN)
    w3 = _random_mxfp4_experts(num_experts, V41_INTER, V41_HIDDEN)
    w2 = _random_mxfp4_experts(num_experts, V41_HIDDEN, V41_INTER)
    for w in (w1, w3, w2):  # experts 0-3: scale bytes 125..200 on some rows (weights x 2^73)
        w.scale[:4, ::7] = torch.randint(125, 201, w.scale[:4, ::7].shape, dtype=torch.uint8,
                                         device="cuda")
    x = torch.randn(num_tokens, V41_HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.5
    ids, weights = _routing(num_tokens, num_experts)
    outs = {}
    for one_mul in (False, True):
        with nan_poisoned_allocations():
            outs[one_mul] = moe_experts.run_experts(x, ids, weights, w1, w3, w2, 10.0, mma="bf16",
                                                    config={"W_ONE_MUL": one_mul})
    assert torch.equal(outs[True], outs[False]), "one-multiply unpack differs from two-multiply"
    ref = moe.moe_routed_experts(x.cpu(), ids.cpu(), weights.cpu(), _dequant_experts(w1).cpu(),
                                 _dequant_experts(w3).cpu(), _dequant_experts(w2).cpu(), 10.0)
    _row("moe mxfp4 W_ONE_MUL", f"N{num_tokens} top{V41_TOPK}/{num_experts}",
         _rel(outs[True].cpu(), ref), 1e-2)


def test_moe_align_pairs_matches_torch_gpu():
    """The align kernels (moe_align: one program, or chunks above MAX_PAIRS) equal the torch
    version bit for bit on the GPU — decode and prefill sizes up to 196,608 pairs, other ranks'
    ids, several block sizes — also when replayed from a CUDA graph with new ids (no host sync,
    fixed shapes)."""
    from deepinfer.kernels.triton import moe_align
    from deepinfer.kernels.triton.moe_experts import _align_pairs

    gen = torch.Generator(device="cuda").manual_seed(0)
    for tokens, experts, block_m in ((1, 384, 16), (64, 384, 16), (256, 384, 16), (682, 384, 16),
                                     (64, 48, 64), (512, 16, 64), (1366, 384, 64),
                                     (4096, 384, 128), (32768, 384, 128), (8192, 48, 16)):
        for foreign in (False, True):
            low, high = (-2, experts + 3) if foreign else (0, experts)
            ids = torch.randint(low, high, (tokens, V41_TOPK), device="cuda", generator=gen)
            got, want = moe_align.align_pairs(ids, experts, block_m), _align_pairs(ids, experts,
                                                                                 block_m)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), \
                (tokens, experts, block_m, foreign)
    for tokens in (64, 4096):  # one program; the chunks
        ids = torch.randint(0, 384, (tokens, V41_TOPK), device="cuda", generator=gen)
        moe_align.align_pairs(ids, 384, 16)  # compile outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = moe_align.align_pairs(ids, 384, 16)
        for _ in range(3):
            ids.copy_(torch.randint(-1, 385, ids.shape, device="cuda", generator=gen))
            graph.replay()
            want = _align_pairs(ids, 384, 16)
            assert torch.equal(out[0], want[0]) and torch.equal(out[1], want[1]), tokens


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, 512])
def test_moe_vouched_one_mul_matches_two_mul_gpu(num_tokens):
    """Weights whose owner vouches for scale bytes <= 128 (``scale_max``) take W_ONE_MUL=2: one
    K loop, no per-program scale check; the outputs are bit-identical to the two-multiply
    unpack's and to the checked mode's."""
    import dataclasses

    from deepinfer.kernels.triton import moe_experts

    num_experts = 16
    ws = [_random_mxfp4_experts(num_experts, V41_INTER, V41_HIDDEN),
          _random_mxfp4_experts(num_experts, V41_INTER, V41_HIDDEN),
          _random_mxfp4_experts(num_experts, V41_HIDDEN, V41_INTER)]
    for w in ws:  # bytes up to exactly 128 on some rows (2^(e - 1) = 2^127, the largest)
        w.scale[:4, ::5] = torch.randint(120, 129, w.scale[:4, ::5].shape, dtype=torch.uint8,
                                         device="cuda")
    vouched = [dataclasses.replace(w, scale_max=int(w.scale.max())) for w in ws]
    assert moe_experts._one_mul_mode(True, *vouched) == 2
    x = torch.randn(num_tokens, V41_HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.5
    ids, weights = _routing(num_tokens, num_experts)
    outs = {}
    for name, w, one_mul in (("two-mul", ws, False), ("checked", ws, True),
                             ("vouched", vouched, True)):
        with nan_poisoned_allocations():
            outs[name] = moe_experts.run_experts(x, ids, weights, *w, 10.0, mma="bf16",
                                                 config={"W_ONE_MUL": one_mul})
    assert torch.equal(outs["vouched"], outs["two-mul"]), "vouched one-multiply unpack differs"
    assert torch.equal(outs["checked"], outs["two-mul"])


def test_word_order_conversion_on_cuda_matches_the_host_gpu():
    """CUDA tensors convert in one Triton launch (mxfp4_words.permute_words); the bytes equal
    the host's torch conversion, both directions, and in place."""
    from deepinfer.kernels import mxfp4_word_order as wo

    packed = torch.randint(-128, 128, (3, V41_INTER, V41_HIDDEN // 2), dtype=torch.int8)
    want = wo.to_word_order(packed)
    got = wo.to_word_order(packed.cuda())
    assert torch.equal(got.cpu(), want)
    wo.from_word_order(got, out=got)
    assert torch.equal(got.cpu(), packed)


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, 512, PREFILL_TOKENS])
def test_moe_word_order_matches_checkpoint_order_gpu(num_tokens):
    """MXFP4 weights re-arranged into word order (mxfp4_words: rotations instead of byte
    permutes in the unpack) give bit-identical outputs to checkpoint order, in the vouched
    one-multiply loop, the checked one (scale bytes up to 200 on some experts) and the
    two-multiply unpack."""
    import dataclasses

    from deepinfer.kernels.triton import moe_experts

    num_experts = 16
    ws = [_random_mxfp4_experts(num_experts, V41_INTER, V41_HIDDEN),
          _random_mxfp4_experts(num_experts, V41_INTER, V41_HIDDEN),
          _random_mxfp4_experts(num_experts, V41_HIDDEN, V41_INTER)]
    x = torch.randn(num_tokens, V41_HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.5
    ids, weights = _routing(num_tokens, num_experts)
    vouched = [dataclasses.replace(w, scale_max=int(w.scale.max())) for w in ws]
    big = [dataclasses.replace(w, scale=w.scale.clone()) for w in ws]
    for w in big:  # experts 0-3: scale bytes up to 200 on some rows (the checked mode's fallback)
        w.scale[:4, ::7] = torch.randint(125, 201, w.scale[:4, ::7].shape, dtype=torch.uint8,
                                         device="cuda")
    for name, base, one_mul in (("vouched", vouched, True), ("checked", big, True),
                                ("two-mul", ws, False)):
        words = [moe_experts.mxfp4_to_word_order(w) for w in base]
        outs = []
        for w in (base, words):
            with nan_poisoned_allocations():
                outs.append(moe_experts.run_experts(x, ids, weights, *w, 10.0,
                                                    config={"W_ONE_MUL": one_mul}))
        assert torch.equal(outs[0], outs[1]), f"word order differs ({name}, N{num_tokens})"


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, PREFILL_TOKENS])
def test_moe_experts_speed_gpu(v41_experts, num_tokens):
    from deepinfer.kernels.triton import moe_experts

    w1, w3, w2 = v41_experts
    x = torch.randn(num_tokens, V41_HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.5
    ids, weights = _routing(num_tokens)
    flops = 6.0 * num_tokens * V41_TOPK * V41_HIDDEN * V41_INTER
    fp8 = [moe_experts.mxfp4_to_fp8(w) for w in (w1, w3, w2)]
    for name, ws, mma in (("moe mxfp4 W4A8 (fp8 mma)", (w1, w3, w2), "fp8"),
                          ("moe mxfp4 W4A16 (bf16 mma)", (w1, w3, w2), "bf16"),
                          ("moe fp8-reencoded", fp8, "fp8")):
        with nan_poisoned_allocations():
            out = moe_experts.run_experts(x, ids, weights, *ws, 10.0, mma=mma)
        finite = 0.0 if torch.isfinite(out).all() else float("nan")
        _row(name, f"N{num_tokens} top{V41_TOPK}/{V41_EXPERTS}", finite, 1.0,
             _ms(lambda ws=ws, mma=mma: moe_experts.run_experts(x, ids, weights, *ws, 10.0,
                                                                mma=mma)), flops)


@pytest.mark.parametrize("precision", ["bf16x3", "tf32x3"])  # hc_coeffs' dot (mhc.py docstring)
@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, PREFILL_TOKENS])  # BM 16 / prefill BM
def test_mhc_gpu(num_tokens, precision, monkeypatch):
    from deepinfer.kernels.reference import mhc
    from deepinfer.kernels.triton import mhc as tri_mhc

    # both launches' precision (decode sizes read COEFFS_PRECISION_DECODE)
    monkeypatch.setattr(tri_mhc, "COEFFS_PRECISION", precision)
    monkeypatch.setattr(tri_mhc, "COEFFS_PRECISION_DECODE", precision)
    assert tri_mhc.coeffs_config(num_tokens)["precision"] == precision
    n, s, d = num_tokens, V41_HC, V41_HIDDEN
    x = torch.randn(n, s, d, device="cuda", dtype=torch.bfloat16)
    fn = torch.randn((2 + s) * s, s * d, device="cuda") * 0.01
    scale = torch.tensor([0.5, 0.7, 1.3], device="cuda")
    base = torch.randn((2 + s) * s, device="cuda") * 0.3
    args = (x, fn, scale, base, 1e-20, 1e-6, 20)
    with nan_poisoned_allocations():
        pre, post, comb = tri_mhc.hc_coeffs(*args)
    ref = mhc.hc_coeffs(*args)
    err = max((o - r).abs().max().item() for o, r in zip((pre, post, comb), ref, strict=True))
    _row(f"hc_coeffs {precision} (abs err)", f"N{n} S{s} D{d}", err, 1e-4,
         _ms(lambda: tri_mhc.hc_coeffs(*args)))
    with nan_poisoned_allocations():
        collapsed = tri_mhc.hc_collapse(x, pre)
    _row("hc_collapse", f"N{n} S{s} D{d}", _rel(collapsed, mhc.hc_collapse(x, pre)), 5e-3,
         _ms(lambda: tri_mhc.hc_collapse(x, pre)))
    out = torch.randn(n, d, device="cuda", dtype=torch.bfloat16)
    with nan_poisoned_allocations():
        expanded = tri_mhc.hc_expand(out, x, post, comb)
    _row("hc_expand", f"N{n} S{s} D{d}", _rel(expanded, mhc.hc_expand(out, x, post, comb)), 5e-3,
         _ms(lambda: tri_mhc.hc_expand(out, x, post, comb)))


def test_engram_and_norm_gpu():
    from deepinfer.kernels.reference import engram, norm
    from deepinfer.kernels.triton import engram as tri_engram
    from deepinfer.kernels.triton import norm as tri_norm

    n, s, d = PREFILL_TOKENS, V41_HC, V41_HIDDEN
    x = torch.randn(n, s, d, device="cuda", dtype=torch.bfloat16)
    key = torch.randn(n, s, d, device="cuda")
    value = torch.randn(n, d, device="cuda")
    wqk = torch.randn(s, d, device="cuda")
    mask = torch.rand(n, device="cuda") > 0.1
    with nan_poisoned_allocations():
        out = tri_engram.engram_inject(x, key, value, wqk, 1e-20, mask)
    _row("engram_inject", f"N{n} S{s} D{d}",
         _rel(out, engram.engram_inject(x, key, value, wqk, 1e-20, mask)), 5e-3,
         _ms(lambda: tri_engram.engram_inject(x, key, value, wqk, 1e-20, mask)))
    # the model's bf16 projection output as it is: the bits of its fp32 copy (session 30)
    kb, vb = key.to(torch.bfloat16), value.to(torch.bfloat16)
    assert torch.equal(tri_engram.engram_inject(x, kb, vb, wqk, 1e-20, mask),
                       tri_engram.engram_inject(x, kb.float(), vb.float(), wqk, 1e-20, mask))
    h = torch.randn(n, d, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(d, device="cuda", dtype=torch.bfloat16)
    with nan_poisoned_allocations():
        y = tri_norm.rms_norm(h, weight, 1e-20)
    _row("rms_norm", f"N{n} D{d}", _rel(y, norm.rms_norm(h, weight, 1e-20)), 5e-3,
         _ms(lambda: tri_norm.rms_norm(h, weight, 1e-20)))


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, PREFILL_TOKENS])
def test_rms_norm_q8_gpu(num_tokens):
    """The query latent's norm with its Q8_32 values in one pass (q_lora_rank 1024 in the
    slice): rms_norm's bits, and the quantizer's bits of them; timed against the two ops."""
    from deepinfer.kernels.reference import norm
    from deepinfer.kernels.triton import norm as tri_norm
    from deepinfer.kernels.triton import quant_act

    d = 1024
    h = torch.randn(num_tokens, d, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(d, device="cuda", dtype=torch.bfloat16)
    with nan_poisoned_allocations():
        y, q = tri_norm.rms_norm_q8(h, weight, 1e-20)
    assert torch.equal(y, tri_norm.rms_norm(h, weight, 1e-20))
    assert torch.equal(q, quant_act.fake_quant_fp8_block32(y))
    _row("rms_norm_q8", f"N{num_tokens} D{d}", _rel(y, norm.rms_norm(h, weight, 1e-20)), 5e-3,
         _ms(lambda: tri_norm.rms_norm_q8(h, weight, 1e-20)))
    _row("rms_norm + q8 (before)", f"N{num_tokens} D{d}", 0.0, 5e-3,
         _ms(lambda: quant_act.fake_quant_fp8_block32(tri_norm.rms_norm(h, weight, 1e-20))))


def test_engram_hash_gpu():
    from deepinfer.kernels.triton import engram as tri_engram
    from deepinfer.runtime.model import engram_hash

    constants = engram_hash.make_engram_hash_constants((1, 14), 4, 8, 16_000_000, 99092, 5)
    ctx = torch.randint(-1, 99092, (8, 3 + 4096), device="cuda")
    with nan_poisoned_allocations():
        out = tri_engram.engram_hash_windows(ctx.unfold(1, 4, 1), constants)
    bad = int((out != engram_hash.engram_hash_ids(ctx, constants)).sum())
    _row("engram_hash_windows (mismatches)", "B8 S4096 L2 M4 H8", bad, 0,
         _ms(lambda: tri_engram.engram_hash_windows(ctx.unfold(1, 4, 1), constants)))


# --- plain/grouped projections, RoPE, Q4E8_32 fake quant (kernels/triton/linear.py, rope.py,
# quant_fp4.py). Tolerances: fp32 outputs (the logit head: fp32 x split into 3 bf16 pieces, exact
# products, fp32 sums over K = 4096) 1e-5; bf16 outputs 5e-3 (final bf16 rounding); RoPE fp32
# 1e-6 (same fp32 formula; cosf/sinf may differ from torch's by an ulp); fp4 fake quant bitwise.

V41_HEAD_HIDDEN, V41_VOCAB, V41_O_GROUPS, V41_O_LORA = 4096, 129280, 8, 1024


@pytest.mark.parametrize("num_tokens", [1, DECODE_TOKENS, 256])
def test_linear_head_gpu(num_tokens):
    from deepinfer.kernels.reference import linear
    from deepinfer.kernels.triton import linear as tri_linear

    w = (torch.randn(V41_VOCAB, V41_HEAD_HIDDEN, device="cuda") * 0.02).to(torch.bfloat16)
    x = torch.randn(num_tokens, V41_HEAD_HIDDEN, device="cuda")
    # any fp32 x (three bf16 pieces), and the head's y.float() (bf16 values: one piece)
    for name, xs in (("linear head fp32 x bf16 w", x),
                     ("linear head bf16-valued x", x.to(torch.bfloat16).float())):
        with nan_poisoned_allocations():
            out = tri_linear.linear(xs, w)
        ms = _ms(lambda xs=xs: tri_linear.linear(xs, w))
        gbps = w.numel() * 2 / (ms * 1e-3) / 1e9
        ref = linear.linear(xs, w)
        _row(name, f"N{num_tokens} O{V41_VOCAB} {gbps:.0f}GB/s", _rel(out, ref),
             1e-5, ms, 2.0 * num_tokens * V41_VOCAB * V41_HEAD_HIDDEN)
        if name == "linear head bf16-valued x":  # the engine's call: bf16 y, fp32 logits
            xb = xs.to(torch.bfloat16)
            with nan_poisoned_allocations():
                out = tri_linear.linear(xb, w, out_dtype=torch.float32)
            ms = _ms(lambda xb=xb: tri_linear.linear(xb, w, out_dtype=torch.float32))
            gbps = w.numel() * 2 / (ms * 1e-3) / 1e9
            assert out.dtype == torch.float32
            _row("linear head bf16 x fp32 out", f"N{num_tokens} O{V41_VOCAB} {gbps:.0f}GB/s",
                 _rel(out, ref), 1e-5, ms, 2.0 * num_tokens * V41_VOCAB * V41_HEAD_HIDDEN)


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, PREFILL_TOKENS])
def test_linear_bf16_gpu(num_tokens):
    from deepinfer.kernels.reference import linear
    from deepinfer.kernels.triton import linear as tri_linear

    for out_features, in_features in ((V41_O_LORA, V41_HIDDEN), (V41_HIDDEN, 8192)):
        x = torch.randn(num_tokens, in_features, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(out_features, in_features, device="cuda") * 0.02).to(torch.bfloat16)
        with nan_poisoned_allocations():
            out = tri_linear.linear(x, w)
        _row("linear bf16", f"M{num_tokens} N{out_features} K{in_features}",
             _rel(out, linear.linear(x, w)), 5e-3, _ms(lambda x=x, w=w: tri_linear.linear(x, w)),
             2.0 * num_tokens * out_features * in_features)
        wf = _random_fp8_weight(out_features, in_features)
        with nan_poisoned_allocations():
            out = tri_linear.linear(x, wf)
        _row("linear fp8 w (no act quant)", f"M{num_tokens} N{out_features} K{in_features}",
             _rel(out, linear.linear(x, wf)), 5e-3,
             _ms(lambda x=x, wf=wf: tri_linear.linear(x, wf)),
             2.0 * num_tokens * out_features * in_features)


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, PREFILL_TOKENS])
def test_linear_promoted_compressor_gpu(num_tokens):
    """The ratio-2 compressor's fp32 projections (K = hidden, O = head_dim, bf16 weight):
    ``promoted`` on bf16 x gives the fp32-x path's bits on x.float(), timed against it (the
    copy and the device flag's passes were ~0.5 ms a 4K layer, round 159)."""
    from deepinfer.kernels.reference import linear
    from deepinfer.kernels.triton import linear as tri_linear

    x = torch.randn(num_tokens, V41_HIDDEN, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(512, V41_HIDDEN, device="cuda") * 0.02).to(torch.bfloat16)
    with nan_poisoned_allocations():
        out = tri_linear.linear(x, w, out_dtype=torch.float32, promoted=True)
    assert torch.equal(out, tri_linear.linear(x.float(), w))
    flops = 2.0 * num_tokens * 512 * V41_HIDDEN
    _row("linear promoted bf16 x", f"M{num_tokens} N512 K{V41_HIDDEN}",
         _rel(out, linear.linear(x, w, out_dtype=torch.float32)), 1e-5,
         _ms(lambda: tri_linear.linear(x, w, out_dtype=torch.float32, promoted=True)), flops)
    _row("linear x.float() (before)", f"M{num_tokens} N512 K{V41_HIDDEN}",
         _rel(out, linear.linear(x, w, out_dtype=torch.float32)), 1e-5,
         _ms(lambda: tri_linear.linear(x.float(), w)), flops)


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, PREFILL_TOKENS])
def test_grouped_linear_gpu(num_tokens):
    from deepinfer.kernels.reference import linear
    from deepinfer.kernels.triton import linear as tri_linear

    g, i, o = V41_O_GROUPS, 4096, V41_O_LORA
    x = torch.randn(num_tokens, g, i, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * num_tokens * g * i * o
    for name, w in (("grouped wo_a fp8 w", _random_fp8_weight(g * o, i)),
                    ("grouped wo_a bf16 w",
                     (torch.randn(g * o, i, device="cuda") * 0.02).to(torch.bfloat16))):
        with nan_poisoned_allocations():
            out = tri_linear.grouped_linear(x, w)
        _row(name, f"N{num_tokens} G{g} I{i} O{o}", _rel(out, linear.grouped_linear(x, w)), 5e-3,
             _ms(lambda w=w: tri_linear.grouped_linear(x, w)), flops)


# (name, groups, out_features, in_features) of the slice's FP8 projections (wo_a grouped)
SLICE_PROJECTIONS = (("wq_a", 1, 1024, V41_HIDDEN), ("wkv", 1, 512, V41_HIDDEN),
                     ("wq_b", 1, 32768, 1024), ("wo_b", 1, V41_HIDDEN, 8192),
                     ("wo_a", V41_O_GROUPS, V41_O_LORA, 4096))


@pytest.mark.parametrize("num_tokens", [1, 7, DECODE_TOKENS, 100, 256])
def test_linear_decode_gpu(num_tokens):
    """``linear_decode`` (the decoded FP8 weight on the MMA's M side) at every row class, the
    slice's projection shapes (split-K on the few-tile ones, wo_a grouped), against the fp64
    reference: 5e-3 (bf16 output); and the split-K sum equal to the unsplit kernel's within
    fp32 reordering."""
    from deepinfer.kernels.reference import linear
    from deepinfer.kernels.triton import linear_decode

    for name, groups, out_features, in_features in SLICE_PROJECTIONS:
        x = torch.randn(num_tokens, groups, in_features, device="cuda", dtype=torch.bfloat16)
        w = _random_fp8_weight(groups * out_features, in_features)
        ref = (linear.linear(x[:, 0], w)[:, None] if groups == 1
               else linear.grouped_linear(x, w))
        with nan_poisoned_allocations():
            out = linear_decode.linear_decode(x, w, out_features)
        flops = 2.0 * num_tokens * groups * out_features * in_features
        _row(f"linear_decode {name}", f"M{num_tokens} G{groups} N{out_features} K{in_features}",
             _rel(out, ref), 5e-3,
             _ms(lambda x=x, w=w, o=out_features: linear_decode.linear_decode(x, w, o)), flops)
        with nan_poisoned_allocations():
            split4 = linear_decode.linear_decode(x, w, out_features, split_k=4)
            unsplit = linear_decode.linear_decode(x, w, out_features, split_k=1)
        _row(f"linear_decode {name} split 4 vs 1", f"M{num_tokens}", _rel(split4, unsplit), 5e-3)


@pytest.mark.parametrize("inverse", [False, True])
def test_apply_rope_gpu(inverse):
    from deepinfer.kernels.reference import rope
    from deepinfer.kernels.triton import rope as tri_rope

    n = PREFILL_TOKENS
    positions = torch.randint(0, 1 << 20, (n,), device="cuda")
    inv_freq = rope.rope_inv_freq(64, 10000.0, rope.Yarn(16.0, 65536, 32.0, 1.0)).cuda()
    for dtype, tol in ((torch.bfloat16, 5e-3), (torch.float32, 1e-6)):
        x = torch.randn(n, 64, 512, device="cuda", dtype=dtype)
        with nan_poisoned_allocations():
            out = tri_rope.apply_rope(x, positions, inv_freq, inverse)
        ref = rope.apply_rope(x, positions, inv_freq, inverse)
        differ = (out != ref).float().mean().item()
        _row(f"apply_rope {str(dtype)[6:]}", f"N{n} H64 D512 R64 ne{differ:.1e}", _rel(out, ref),
             tol, _ms(lambda x=x: tri_rope.apply_rope(x, positions, inv_freq, inverse)))
        # in place: the same bits, x itself returned; timed on a scratch copy (rotating it
        # again and again: the bytes moved are what counts)
        y = x.clone()
        got = tri_rope.apply_rope(y, positions, inv_freq, inverse, in_place=True)
        assert got is y and torch.equal(got, out)
        _row(f"apply_rope {str(dtype)[6:]} in place", f"N{n} H64 D512 R64", _rel(got, ref), tol,
             _ms(lambda y=y: tri_rope.apply_rope(y, positions, inv_freq, inverse,
                                                 in_place=True)))


def test_fake_quant_fp4_gpu():
    from deepinfer.kernels.reference import quant
    from deepinfer.kernels.triton import quant_fp4

    x = torch.randn(PREFILL_TOKENS, 64, 128, device="cuda", dtype=torch.bfloat16) * 3
    x[0, 0] = 0.0
    x[1, 0] = -x[1, 0].abs() * 1e-6
    with nan_poisoned_allocations():
        out = quant_fp4.fake_quant_fp4_ue8m0_block32(x)
    ref = quant.fake_quant_fp4_ue8m0_block32(x)
    bad = int((out.view(torch.int16) != ref.view(torch.int16)).sum())
    _row("fake_quant_fp4 (mismatches)", f"{PREFILL_TOKENS}x64x128 bf16", bad, 0,
         _ms(lambda: quant_fp4.fake_quant_fp4_ue8m0_block32(x)))


def test_linear_rope_fp4_cuda_graph_capture():
    """The four ops launch without host syncs: capture them in a CUDA graph, replay on new data."""
    from deepinfer.kernels.reference import linear, quant, rope
    from deepinfer.kernels.triton import linear as tri_linear
    from deepinfer.kernels.triton import quant_fp4
    from deepinfer.kernels.triton import rope as tri_rope

    n = 8
    x = torch.randn(n, V41_HEAD_HIDDEN, device="cuda")
    w = (torch.randn(4096, V41_HEAD_HIDDEN, device="cuda") * 0.02).to(torch.bfloat16)
    xg = torch.randn(n, V41_O_GROUPS, 512, device="cuda", dtype=torch.bfloat16)
    wg = _random_fp8_weight(V41_O_GROUPS * V41_O_LORA, 512)
    q = torch.randn(n, 64, 512, device="cuda", dtype=torch.bfloat16)
    positions = torch.arange(n, device="cuda")
    inv_freq = rope.rope_inv_freq(64, 10000.0).cuda()

    def step():
        return (tri_linear.linear(x, w), tri_linear.grouped_linear(xg, wg),
                tri_rope.apply_rope(q, positions, inv_freq, True),
                quant_fp4.fake_quant_fp4_ue8m0_block32(q[..., :128]))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # compile outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    for t in (x, xg, q):
        t.copy_(torch.randn_like(t, dtype=torch.float32).to(t.dtype))
    positions.add_(1000)
    graph.replay()
    torch.cuda.synchronize()
    refs = (linear.linear(x, w), linear.grouped_linear(xg, wg),
            rope.apply_rope(q, positions, inv_freq, True),
            quant.fake_quant_fp4_ue8m0_block32(q[..., :128]))
    for name, out, ref, tol in zip(("linear", "grouped_linear", "apply_rope", "fake_quant_fp4"),
                                   outs, refs, (1e-5, 5e-3, 5e-3, 0.0), strict=True):
        _row(f"graph replay {name}", f"N{n}", _rel(out, ref), tol)


@pytest.mark.parametrize("num_tokens", [DECODE_TOKENS, PREFILL_TOKENS])
def test_engram_rows_gpu(num_tokens):
    """The engram table's rows gathered and dequantized in one launch (session 33): 24 ids a
    token into a 1M-row FP8 table of 256 columns (the 384M-row one's access pattern), the bits
    of ``Fp8Rows.__getitem__`` (the torch gather it replaces), both timed."""
    from deepinfer.kernels.quantized import Fp8Rows
    from deepinfer.kernels.triton import engram_rows

    num_rows, cols, num_ids = 1 << 20, 256, 24
    codes = (torch.randn(num_rows, cols, device="cuda") * 64).to(torch.float8_e4m3fn)
    scale = torch.randint(100, 140, (num_rows, cols // 32), dtype=torch.uint8, device="cuda")
    table = Fp8Rows(codes, scale)
    ids = torch.randint(0, num_rows, (num_tokens, num_ids), device="cuda")
    with nan_poisoned_allocations():
        got = engram_rows.engram_rows(table, ids)
    want = table[ids]
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    _row("engram_rows", f"N{num_tokens} x {num_ids}", 0.0, 0.0,
         _ms(lambda: engram_rows.engram_rows(table, ids)))
    _row("engram rows (torch)", f"N{num_tokens} x {num_ids}", 0.0, 0.0, _ms(lambda: table[ids]))
