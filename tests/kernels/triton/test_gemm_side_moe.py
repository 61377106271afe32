"""MoE router and grouped expert GEMMs (kernels/triton/moe_routing.py, moe_experts.py).

Tolerances:
  * router ids: bitwise. Inputs are dyadic (x in 1/8 steps, gate in 1/16 steps, D=64), so every
    logit is exact in fp32 and the selection cannot depend on summation order; duplicated gate rows
    with equal bias force exact ties (lower expert id first). Weights: rel 1e-6 (fp32 exp/log/sqrt
    of the interpreter vs torch, a few ulp).
  * experts: W1/W3/W2 products and all scales are exact and Q8_32 of h is recomputed in the
    kernel epilogue; the only difference from the fp64 reference is fp32 summation over D, I <= 96,
    which can move an h value across a Q8_32 rounding boundary (rare): rel 1e-5 on fp32 outputs.
"""

import os

import pytest
import torch

triton = pytest.importorskip("triton")

from deepinfer.kernels import formats  # noqa: E402
from deepinfer.kernels.reference import moe  # noqa: E402
from deepinfer.kernels.triton import moe_experts, moe_routing, mxfp4_unpack  # noqa: E402


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("with_image,gate_temp,normalize", [(False, 1.0, True), (True, 0.7, True),
                                                             (False, 1.0, False)])
def test_route_sqrtsoftplus(with_image, gate_temp, normalize):
    g = torch.Generator().manual_seed(11)
    num_tokens, dim, num_experts, topk = 21, 64, 48, 6
    x = torch.randint(-8, 9, (num_tokens, dim), generator=g) / 8.0
    gate = torch.randint(-4, 5, (num_experts, dim), generator=g) / 16.0
    bias = torch.randint(-3, 4, (num_experts,), generator=g) / 4.0
    gate[10:20] = gate[0:10]  # exact ties between experts e and e + 10
    bias[10:20] = bias[0:10]
    bias_vl = torch.randint(-3, 4, (num_experts,), generator=g) / 4.0 if with_image else None
    image_mask = (torch.rand(num_tokens, generator=g) > 0.5) if with_image else None
    args = (x, gate, bias, bias_vl, image_mask, topk, 1.5, gate_temp, normalize)
    w, ids = moe_routing.route_sqrtsoftplus(*args)
    ref_w, ref_ids = moe.route_sqrtsoftplus(*args)
    assert ids.dtype == torch.int64 and torch.equal(ids, ref_ids)
    assert w.dtype == torch.float32 and _rel(w, ref_w) < 1e-6


def test_route_config_spreads_decode_batches():
    """The scores' GPU tiles: a decode batch (up to ROUTE_DECODE_MAX_TOKENS) of 384 experts runs
    on ~100-200 programs (round 117a: 24 programs of 64 x 64 at 256 tokens, 26 µs a call);
    prefill sizes take 64-token wgmma tiles, 128 experts wide from a wave of programs (4K
    tokens), 64 below (twice the programs of a mid-size prefill)."""
    def programs(n: int) -> int:
        cfg = moe_routing.route_config(n, 384)
        return -(-n // cfg["BM"]) * -(-384 // cfg["BE"])

    assert moe_routing.route_config(64, 384)["BE"] == 16 and programs(64) == 96
    assert programs(128) == 96 and programs(256) == 192
    assert programs(moe_routing.ROUTE_DECODE_MAX_TOKENS + 1) > programs(256) // 8
    assert moe_routing.route_config(4096, 384)["BM"] == 64
    assert moe_routing.route_config(4096, 384)["BE"] == 128 and programs(4096) == 192
    assert moe_routing.route_config(2048, 384)["BE"] == 64 and programs(2048) == 192


def _experts(num_experts: int, inter: int, dim: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(num_experts, inter, dim, generator=g) * 0.1
    w3 = torch.randn(num_experts, inter, dim, generator=g) * 0.1
    w2 = torch.randn(num_experts, dim, inter, generator=g) * 0.1
    packed = [moe_experts.pack_mxfp4_experts(w) for w in (w1, w3, w2)]

    def dequant(p):
        return torch.stack([formats.dequantize_fp4_weight(p.data[e], p.scale[e])
                            for e in range(num_experts)])

    return packed, [dequant(p) for p in packed]


def _routed(num_tokens: int, dim: int, num_experts: int, topk: int, seed: int):
    """x (N, D), distinct expert ids (N, topk), routing weights (N, topk), seeded."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_tokens, dim, generator=g)
    ids = torch.stack([torch.randperm(num_experts, generator=g)[:topk] for _ in range(num_tokens)])
    return x, ids, torch.rand(num_tokens, topk, generator=g)


@pytest.mark.parametrize("variant", ["mxfp4_fp8mma", "mxfp4_bf16mma", "mxfp4_bf16mma_prefill",
                                     "mxfp4_bf16mma_interleaved", "mxfp4_bf16mma_abf16",
                                     "mxfp4_bf16mma_abf16_prefill", "fp8_reencoded",
                                     "fp8_reencoded_abf16", "plain", "plain_abf16"])
def test_moe_routed_experts(variant):
    """Decode-sized (7 tokens) and, for _prefill, 40 tokens (120 pairs > 16 per expert: the
    prefill class); MXFP4 bf16 dots take the split even/odd unpack in both, _interleaved forces
    the interleaved fp32-bits unpack (bench/moe_decode.py's comparison tilings), _abf16
    activations and h as rounded values (A_BF16) instead of codes + scales."""
    num_tokens = 40 if variant.endswith("_prefill") else 7
    dim, inter, num_experts, topk = 64, 64, 6, 3
    assert moe_experts.moe_config(num_tokens * topk, num_experts, interpret=True)["SPLIT_K"]
    x, ids, weights = _routed(num_tokens, dim, num_experts, topk, seed=5)
    packed, dequant = _experts(num_experts, inter, dim, seed=6)
    limit = 0.7  # small enough that both clamps are exercised
    ref = moe.moe_routed_experts(x, ids, weights, *dequant, limit)
    if variant == "mxfp4_fp8mma":
        out = moe_experts.run_experts(x, ids, weights, *packed, limit, mma="fp8")
    elif variant.startswith("mxfp4_bf16mma"):
        out = moe_experts.run_experts(x, ids, weights, *packed, limit, mma="bf16",
                                      config={"SPLIT_K": "interleaved" not in variant,
                                              "A_BF16": "abf16" in variant})
    elif variant.startswith("fp8_reencoded"):
        out = moe_experts.run_experts(
            x, ids, weights, *[moe_experts.mxfp4_to_fp8(p) for p in packed], limit,
            config={"A_BF16": "abf16" in variant})
    else:
        out = moe_experts.run_experts(x, ids, weights, *dequant, limit,
                                      config={"A_BF16": "abf16" in variant})
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert _rel(out, ref) < 1e-5


def test_mxfp4_to_fp8_is_lossless():
    packed, dequant = _experts(2, 32, 64, seed=8)
    fp8 = moe_experts.mxfp4_to_fp8(packed[0])
    scales = formats.ue8m0_to_float(fp8.scale).repeat_interleave(32, -1)
    values = fp8.data.to(torch.float32) * scales
    assert torch.equal(values, dequant[0])


def test_expert_ffn_shared_fp8_weights():
    from deepinfer.kernels.triton.gemm_fp8 import Fp8BlockWeight

    g = torch.Generator().manual_seed(9)
    dim, inter = 64, 96
    x = torch.randn(5, dim, generator=g).half()
    ws = [formats.quantize_fp8_weight(torch.randn(*s, generator=g) * 0.1)
          for s in ((inter, dim), (inter, dim), (dim, inter))]
    deq = [formats.dequantize_fp8_weight(c, s).half() for c, s in ws]
    route_weight = torch.rand(5, generator=g)
    ref = moe.expert_ffn(x, *deq, 10.0, route_weight)
    out = moe_experts.expert_ffn(x, *[Fp8BlockWeight(c, s) for c, s in ws], 10.0, route_weight)
    assert out.dtype == torch.float16
    assert _rel(out, ref) < 2e-3  # fp16 intermediates: one fp16 rounding (2^-11) can flip


def test_skip_foreign_ids_per_pair_outputs():
    """EP use: ids outside [0, E) are other ranks' experts; their per-pair rows come back 0."""
    num_tokens, dim, inter, num_experts, topk = 5, 64, 32, 4, 2
    g = torch.Generator().manual_seed(13)
    x = torch.randn(num_tokens, dim, generator=g)
    ids = torch.tensor([[0, 5], [2, -1], [7, 1], [3, 0], [1, 2]])
    weights = torch.rand(num_tokens, topk, generator=g)
    packed, dequant = _experts(num_experts, inter, dim, seed=14)
    y = moe_experts.run_experts(x, ids, weights, *packed, 10.0, combine=False,
                                skip_foreign_ids=True).view(num_tokens, topk, dim)
    for t in range(num_tokens):
        for k in range(topk):
            e = int(ids[t, k])
            if 0 <= e < num_experts:
                ref = moe.expert_ffn(x[t:t + 1], dequant[0][e], dequant[1][e], dequant[2][e], 10.0,
                                     weights[t, k:k + 1])
                assert _rel(y[t, k:k + 1], ref) < 1e-5
            else:
                assert torch.equal(y[t, k], torch.zeros(dim))


def test_align_pairs_groups_by_expert():
    ids = torch.tensor([[3, 1], [1, 0], [3, 2], [1, 3]])
    sorted_pairs, block_expert = moe_experts._align_pairs(ids, num_experts=5, block_m=2)
    # pairs by expert: 0:[3] 1:[1,2,6] 2:[5] 3:[0,4,7]; 8 = padding
    assert block_expert.tolist()[:6] == [0, 1, 1, 2, 3, 3]
    assert all(b == -1 for b in block_expert.tolist()[6:])
    assert sorted_pairs.tolist()[:12] == [3, 8, 1, 2, 6, 8, 5, 8, 0, 4, 7, 8]


# --- SM90 compile gate -----------------------------------------------------------------------

V41_HIDDEN, V41_INTER, V41_EXPERTS, V41_TOPK = 5120, 2304, 384, 6


def _moe_case(name, gated, fmt, mma, scale_rows, num_pairs, a_bf16=None, one_mul=None,
              words=False, w4a8=False) -> dict:
    cfg = moe_experts.moe_config(num_pairs, V41_EXPERTS, plain=fmt == moe_experts.FMT_PLAIN,
                                 mma=mma, fp8_weights=fmt == moe_experts.FMT_FP8)
    if w4a8:  # run_experts' override for W4A8-order weights: folded tiles, BK 128
        cfg = {**cfg, "SPLIT_K": False, "W_ONE_MUL": False, "BK": 128,
               "DOWN": {**cfg.get("DOWN", {}), "BK": 128}}
    if not gated:
        cfg = {**cfg, **cfg.get("DOWN", {})}
    a_bf16 = cfg["A_BF16"] if a_bf16 is None else a_bf16
    one_mul = cfg["W_ONE_MUL"] if one_mul is None else one_mul
    w_ty = {moe_experts.FMT_MXFP4: "*u8", moe_experts.FMT_FP8: "*u8",
            moe_experts.FMT_PLAIN: "*bf16"}[fmt]
    s_ty = "*u8" if fmt != moe_experts.FMT_PLAIN else w_ty
    a_ty = "*bf16" if a_bf16 else "*u8"
    h_ty = "*bf16" if (a_bf16 or not gated) else "*u8"
    sig = {"a_ptr": a_ty, "a_scale_ptr": a_ty, "w1_ptr": w_ty, "s1_ptr": s_ty,
           "w3_ptr": w_ty, "s3_ptr": s_ty, "sorted_pairs_ptr": "*i32",
           "block_expert_ptr": "*i32", "route_w_ptr": "*fp32",
           "out_ptr": h_ty, "out_scale_ptr": h_ty,
           "num_pairs": "i32", "O": "i32", "K": "i32", "a_row_div": "i32", "limit": "fp32",
           "stride_am": "i32", "stride_asm": "i32", "stride_we": "i32", "stride_wn": "i32",
           "stride_se": "i32", "stride_sn": "i32", "stride_om": "i32", "stride_osm": "i32"}
    ce = {"GATED": gated, "FMT": fmt, "SCALE_ROWS": scale_rows, "MMA_FP8": cfg["MMA_FP8"],
          "DOT_BF16": True, "ACT": 1, "SPLIT_K": cfg["SPLIT_K"],
          "A_BF16": a_bf16, "W_ONE_MUL": one_mul, "BM": cfg["BM"], "BN": cfg["BN"], "BK": cfg["BK"],
          "W_WORDS": words, "W_W4A8": w4a8}
    return {"id": name, "module": "deepinfer.kernels.triton.moe_experts",
            "kernel": "_moe_gemm_kernel", "signature": sig, "constexprs": ce,
            "num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"],
            "expect_wgmma": cfg["BM"] >= 64,  # BM=16 decode tiles use mma.sync
            "no_spill": True, "divisible": ["O", "K"],
            # run_experts caps the vouched loop only (W_ONE_MUL 2); the decode cap (168: 3
            # programs per SM) spills 16 B there, measured faster than the uncapped 177
            # registers (session 7, round 19)
            "maxnreg": cfg.get("maxnreg") if one_mul == 2 else None,
            "max_stack": 32 if cfg.get("maxnreg") and one_mul == 2 else 0}


def test_sm90_compile(sm90_compile):
    decode, prefill = 64 * V41_TOPK, 8192 * V41_TOPK  # (token, slot) pairs
    fp4, fp8, plain = moe_experts.FMT_MXFP4, moe_experts.FMT_FP8, moe_experts.FMT_PLAIN
    # Default: the production ("auto") configs of each class plus the largest-shared-memory forced
    # variants (~4 s of CPU per compile); DI_FULL_TEST=1 compiles the whole
    # {up, down} x {auto, w4a8, w4a16, fp8} x {decode, prefill} grid.
    cases = [_moe_case("moe_up_mxfp4_auto_decode", True, fp4, "auto", 1, decode),
             _moe_case("moe_down_mxfp4_auto_decode", False, fp4, "auto", 1, decode),
             _moe_case("moe_up_fp8_auto_decode", True, fp8, "auto", 1, decode),
             _moe_case("moe_up_mxfp4_codes_decode", True, fp4, "auto", 1, decode, a_bf16=False,
                       one_mul=False),
             _moe_case("moe_down_mxfp4_auto_prefill", False, fp4, "auto", 1, prefill),
             _moe_case("moe_up_mxfp4_twomul_decode", True, fp4, "auto", 1, decode,
                       one_mul=False),
             _moe_case("moe_up_mxfp4_vouched_decode", True, fp4, "auto", 1, decode, one_mul=2),
             _moe_case("moe_down_mxfp4_vouched_decode", False, fp4, "auto", 1, decode,
                       one_mul=2),
             _moe_case("moe_down_mxfp4_vouched_decode1", False, fp4, "auto", 1, V41_TOPK,
                       one_mul=2),
             _moe_case("moe_up_mxfp4_words_decode", True, fp4, "auto", 1, decode, one_mul=2,
                       words=True),
             _moe_case("moe_down_mxfp4_words_decode", False, fp4, "auto", 1, decode, one_mul=2,
                       words=True),
             _moe_case("moe_up_mxfp4_words_prefill", True, fp4, "auto", 1, prefill, one_mul=2,
                       words=True),
             _moe_case("moe_up_mxfp4_twomul_prefill", True, fp4, "auto", 1, prefill,
                       one_mul=False),
             _moe_case("moe_up_mxfp4_w4a8_decode", True, fp4, "fp8", 1, decode),
             _moe_case("moe_up_mxfp4_auto_prefill", True, fp4, "auto", 1, prefill),
             _moe_case("moe_up_mxfp4_w4a8_prefill", True, fp4, "fp8", 1, prefill),
             _moe_case("moe_down_mxfp4_w4a16_prefill", False, fp4, "bf16", 1, prefill),
             _moe_case("moe_up_plain_bf16_prefill", True, plain, "auto", 1, prefill),
             _moe_case("moe_up_mxfp4_w4a8order_prefill", True, fp4, "auto", 1, prefill,
                       w4a8=True),
             _moe_case("moe_down_mxfp4_w4a8order_prefill", False, fp4, "auto", 1, prefill,
                       w4a8=True)]
    if os.environ.get("DI_FULL_TEST") == "1":
        for phase, pairs in (("decode", decode), ("prefill", prefill)):
            for gated in (True, False):
                stage = "up" if gated else "down"
                cases += [_moe_case(f"full_{stage}_auto_{phase}", gated, fp4, "auto", 1, pairs),
                          _moe_case(f"full_{stage}_w4a8_{phase}", gated, fp4, "fp8", 1, pairs),
                          _moe_case(f"full_{stage}_w4a16_{phase}", gated, fp4, "bf16", 1, pairs),
                          _moe_case(f"full_{stage}_fp8_{phase}", gated, fp8, "auto", 1, pairs),
                          _moe_case(f"full_{stage}_fp8_w8a8_{phase}", gated, fp8, "fp8", 1,
                                    pairs)]
        cases.append(_moe_case("full_up_shared_fp8_32x32", True, fp8, "auto", 32, 64))
        cases.append(_moe_case("full_up_shared_fp8_32x32_prefill", True, fp8, "auto", 32,
                               prefill))
        cases.append(_moe_case("full_up_plain_bf16_decode", True, plain, "auto", 1, decode))
    for res in (False, True):  # fp32 sums, or + the shared expert's output in bf16 bits
        cases.append({"id": f"moe_combine_top6{'_residual' if res else ''}",
                      "module": "deepinfer.kernels.triton.moe_experts",
                      "kernel": "_moe_combine_kernel",
                      "signature": {"y_ptr": "*bf16", "ids_ptr": "*i64",
                                    "res_ptr": "*bf16" if res else "*fp32",
                                    "out_ptr": "*i16" if res else "*fp32", "D": "i32",
                                    "stride_ym": "i32", "stride_rm": "i32", "stride_om": "i32"},
                      "constexprs": {"TOPK": V41_TOPK, "KP": 8, "BLOCK_D": 1024,
                                     "HAS_RES": res, "OUT_BF16_BITS": res},
                      "num_warps": 4, "num_stages": 1})
    for phase, tokens in (("decode", 64), ("prefill", 8192)):
        rcfg = moe_routing.route_config(tokens, V41_EXPERTS)
        cases.append({"id": f"route_scores_384x5120_{phase}",
                      "module": "deepinfer.kernels.triton.moe_routing",
                      "kernel": "_route_scores_kernel",
                      "signature": {"x_ptr": "*bf16", "gate_ptr": "*bf16", "scores_ptr": "*fp32",
                                    "N": "i32", "E": "i32", "D": "i32", "stride_xm": "i32",
                                    "stride_ge": "i32", "stride_sm": "i32", "gate_temp": "fp32"},
                      "constexprs": {"DOT_BF16": True, "BM": rcfg["BM"], "BE": rcfg["BE"],
                                     "BK": rcfg["BK"]},
                      "num_warps": rcfg["num_warps"], "num_stages": rcfg["num_stages"],
                      "expect_wgmma": phase == "prefill", "no_spill": True,
                      "divisible": ["D", "E"]})
    cases.append({"id": "route_topk_384_top6", "module": "deepinfer.kernels.triton.moe_routing",
                  "kernel": "_route_topk_kernel",
                  "signature": {"scores_ptr": "*fp32", "bias_ptr": "*fp32", "bias_vl_ptr": "*fp32",
                                "image_mask_ptr": "*i8", "weights_ptr": "*fp32", "ids_ptr": "*i64",
                                "N": "i32", "E": "i32", "stride_sm": "i32", "route_scale": "fp32"},
                  "constexprs": {"HAS_IMAGE": True, "NORMALIZE": True, "TOPK": V41_TOPK, "KP": 8,
                                 "BT": rcfg["BT"], "E_PAD": rcfg["E_PAD"]},
                  "num_warps": rcfg["topk_warps"], "num_stages": 1, "no_spill": True})
    sm90_compile(cases)


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_moe_over_replica_slots_with_logical_combine_order_equals_logical_stacks(backend):
    """Physical slot stacks (shuffled, two replicas of expert 2) selected by slot id, each
    token's sum ordered by its logical ids (``combine_ids``) == the logical stacks, bit for bit."""
    num_tokens, dim, inter, num_experts, topk = 9, 64, 64, 5, 3
    x, ids, weights = _routed(num_tokens, dim, num_experts, topk, seed=11)
    _, dequant = _experts(num_experts, inter, dim, seed=12)
    phy2log = torch.tensor([2, 4, 0, 2, 1, 3])  # expert 2 on slots 0 and 3
    slots = [w[phy2log] for w in dequant]
    first = torch.tensor([(phy2log == e).nonzero()[0, 0] for e in range(num_experts)])
    slot_ids = torch.where((ids == 2) & (torch.arange(num_tokens)[:, None] % 2 == 1), 3,
                           first[ids])
    assert torch.equal(phy2log[slot_ids], ids) and (slot_ids == 3).any()
    op = moe.moe_routed_experts if backend == "reference" else moe_experts.moe_routed_experts
    want = op(x, ids, weights, *dequant, 0.7)
    got = op(x, slot_ids, weights, *slots, 0.7, combine_ids=ids)
    assert torch.equal(got, want)


@pytest.mark.parametrize("backend", ["reference", "triton"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_moe_routed_experts_with_residual_adds_it_in_the_combine(backend, dtype):
    """``residual=`` (the shared expert's output): the op returns the fp32 sum + residual
    rounded once to residual's dtype — bit for bit what the model computed before as
    ``(moe_routed_experts(...) + shared).to(x.dtype)`` —, with ``combine_ids`` too, and an
    empty batch stays empty."""
    num_tokens, dim, inter, num_experts, topk = 9, 64, 64, 5, 3
    x, ids, weights = _routed(num_tokens, dim, num_experts, topk, seed=13)
    x = x.to(dtype)
    _, dequant = _experts(num_experts, inter, dim, seed=14)
    residual = (torch.randn(num_tokens, dim, generator=torch.Generator().manual_seed(15))
                .to(dtype))
    op = moe.moe_routed_experts if backend == "reference" else moe_experts.moe_routed_experts
    for combine_ids in (None, ids.flip(1)):  # an order other than the ids' own is honoured
        want = (op(x, ids, weights, *dequant, 0.7, combine_ids=combine_ids)
                + residual).to(dtype)
        got = op(x, ids, weights, *dequant, 0.7, combine_ids=combine_ids, residual=residual)
        assert got.dtype == dtype and torch.equal(got, want), backend
    empty = op(x[:0], ids[:0], weights[:0], *dequant, 0.7, residual=residual[:0])
    assert empty.shape == (0, dim) and empty.dtype == dtype


# --- the inline-PTX MXFP4 unpack, run by a small PTX interpreter ------------------------------


def _run_ptx(asm: str, operands: dict[int, int]) -> dict[int, int]:
    """Execute the straight-line b32 PTX of ``mxfp4_unpack.E2M1X4_TO_BF16`` (mov, prmt, shl,
    and, or, fma.rn.bf16x2) on integer registers; ``$n`` operands in and out."""
    regs: dict[str, int] = {f"${k}": v for k, v in operands.items()}

    def val(tok: str) -> int:
        tok = tok.strip()
        return regs[tok] if tok in regs else int(tok, 0) & 0xFFFFFFFF

    def bf16x2(x: int) -> torch.Tensor:
        return torch.tensor([x & 0xFFFF, x >> 16], dtype=torch.int32).to(torch.int16) \
            .view(torch.bfloat16).float()

    for stmt in asm.replace("\n", " ").split(";"):
        stmt = stmt.strip(" {}")
        if not stmt or stmt.startswith(".reg"):
            continue
        op, args = stmt.split(None, 1)
        d, *src = [a.strip() for a in args.split(",")]
        if op == "mov.b32":
            r = val(src[0])
        elif op == "prmt.b32":
            pool = val(src[0]) | (val(src[1]) << 32)
            sel = val(src[2])
            r = sum(((pool >> (8 * ((sel >> (4 * i)) & 0x7))) & 0xFF) << (8 * i) for i in range(4))
        elif op == "shl.b32":
            r = (val(src[0]) << val(src[1])) & 0xFFFFFFFF
        elif op == "and.b32":
            r = val(src[0]) & val(src[1])
        elif op == "or.b32":
            r = val(src[0]) | val(src[1])
        elif op == "fma.rn.bf16x2":
            a, b, c = (bf16x2(val(s)) for s in src)
            out = (a * b + c).to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
            r = int(out[0]) | (int(out[1]) << 16)
        else:
            raise AssertionError(f"unexpected PTX op {op}")
        regs[d] = r
    return {k: regs[f"${k}"] for k in range(4)}


def test_inline_ptx_unpack_is_exact_for_every_byte_and_scale():
    """The GPU path's PTX (run here by a tiny interpreter): for every byte value in each of the
    four packed positions and scale exponents from subnormal to large, the low and high nibbles
    come out as e2m1 * 2^(e - 127) in bf16, exactly, in the documented registers."""
    from deepinfer.kernels.formats import dequantize_fp4_weight

    asm = mxfp4_unpack.E2M1X4_TO_BF16.value
    every_byte = torch.arange(256, dtype=torch.uint8).view(16, 16)  # row r: bytes 16r .. 16r+15

    def bf16_bits(v: float) -> int:
        return int(torch.tensor([v]).to(torch.bfloat16).view(torch.int16).to(torch.int32)) & 0xFFFF

    for e in (1, 100, 120, 127, 128):
        want = dequantize_fp4_weight(every_byte.view(torch.int8),
                                     torch.full((16, 1), e, dtype=torch.uint8)).view(256, 2)
        s = bf16_bits(2.0 ** (e - 127)) * 0x10001  # the same scale in both halves
        for byte in range(256):
            for pos in range(4):
                out = _run_ptx(asm, {4: byte << (8 * pos), 5: s, 6: s})
                reg, half = divmod(pos, 2)
                lo = (out[reg] >> (16 * half)) & 0xFFFF
                hi = (out[2 + reg] >> (16 * half)) & 0xFFFF
                assert lo == bf16_bits(float(want[byte, 0])), (e, byte, pos)
                assert hi == bf16_bits(float(want[byte, 1])), (e, byte, pos)


@pytest.mark.parametrize("abf16", [False, True])
def test_rounded_input_gives_the_same_bits(abf16):
    """``x_rounded`` (the block's site hands over Q8_32 values rounded once): the experts of
    those values skip their rounding and give the bits of the unrounded input's run (rounding
    Q8_32 values again returns them), through the codes path and the A_BF16 values path."""
    from deepinfer.kernels.triton import quant_act

    dim, inter, num_experts, topk = 64, 64, 6, 3
    x, ids, weights = _routed(40, dim, num_experts, topk, seed=11)
    packed, _ = _experts(num_experts, inter, dim, seed=12)
    xq = quant_act.fake_quant_fp8_block32(x)
    cfg = {"A_BF16": abf16}
    want = moe_experts.run_experts(x, ids, weights, *packed, 0.7, config=cfg)
    got = moe_experts.run_experts(xq, ids, weights, *packed, 0.7, config=cfg, x_rounded=True)
    assert torch.equal(got, want)
    res = torch.randn(40, dim, generator=torch.Generator().manual_seed(13))
    assert torch.equal(
        moe_experts.moe_routed_experts(xq, ids, weights, *packed, 0.7, residual=res,
                                       x_rounded=True),
        moe_experts.moe_routed_experts(x, ids, weights, *packed, 0.7, residual=res))
