"""Plain/grouped projections, RoPE and Q4E8_32 fake quantization (kernels/triton/linear.py,
rope.py, quant_fp4.py) under the interpreter against the torch references, plus the SM90 compile
gate of their ``aot_cases()``.

Tolerances (the interpreter computes bf16 wrongly, so inputs are fp32/fp16; the GPU-only bf16
tensor-core path is tested in tests/gpu/test_gemm_side_gpu.py):
  * linear / grouped_linear: every product is exact (fp32 x is split into three bf16 pieces
    against a bf16-exact weight, or multiplied in fp32 against an fp32 weight), so only fp32
    summation differs from the fp64 reference: K <= 160 terms, rel error <= K * 2^-24 ~ 1e-5
    worst case (measured ~5e-8); fp32 outputs use rel 1e-6, fp16 outputs one fp16 rounding
    (rel 1e-3, 2^-10).
  * apply_rope: the same fp32 formula; the interpreter's numpy cos/sin are within 1 ulp of
    torch's (measured max abs 6e-8 on O(1) values), so fp32 allows abs 1e-6 per element, and fp16
    one fp16 rounding step of |y| (abs 2^-10 * max|y|). Pass-through channels are bit-exact.
  * fake_quant_fp4_ue8m0_block32: bit-exact (a rounding op), including the sign of zero.
"""

import pytest
import torch

triton = pytest.importorskip("triton")

from deepinfer.kernels import formats  # noqa: E402
from deepinfer.kernels.quantized import Fp8BlockWeight, Mxfp4ExpertWeights  # noqa: E402
from deepinfer.kernels.reference import linear, quant, rope  # noqa: E402
from deepinfer.kernels.triton import linear as tri_linear  # noqa: E402
from deepinfer.kernels.triton import quant_fp4 as tri_quant_fp4  # noqa: E402
from deepinfer.kernels.triton import rope as tri_rope  # noqa: E402


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def _fp8_weight(rows: int, cols: int, g: torch.Generator) -> Fp8BlockWeight:
    codes, scale = formats.quantize_fp8_weight(torch.randn(rows, cols, generator=g))
    return Fp8BlockWeight(codes, scale)


# rows: 1, a non-multiple of BM=16, and two M tiles; K=80 is not a multiple of BK=32 (masks).
@pytest.mark.parametrize("rows,out_features,in_features,x_dtype,w_dtype", [
    (1, 40, 64, torch.float32, torch.bfloat16),  # fp32 x, bf16 w: the bf16x3 split (the head)
    (21, 33, 80, torch.float32, torch.bfloat16),
    (5, 48, 64, torch.float32, torch.float32),  # fp32 w: ieee fp32 dot
    (19, 40, 96, torch.float16, torch.bfloat16),  # fp16 x: two bf16 pieces
    (3, 24, 160, torch.float16, torch.float16),
])
def test_linear_plain(rows, out_features, in_features, x_dtype, w_dtype):
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, in_features, generator=g).to(x_dtype)
    w = (torch.randn(out_features, in_features, generator=g) * 0.1).to(w_dtype)
    out = tri_linear.linear(x, w)
    ref = linear.linear(x, w)
    assert out.dtype == x_dtype and out.shape == ref.shape
    assert _rel(out, ref) < (1e-6 if x_dtype == torch.float32 else 1e-3)


def test_linear_fp32_x_with_bf16_values():
    # the head's y.float(): a device flag selects one bf16 dot instead of three
    g = torch.Generator().manual_seed(8)
    x = torch.randn(9, 96, generator=g).to(torch.bfloat16).float()
    w = torch.randn(40, 96, generator=g).to(torch.bfloat16)
    assert _rel(tri_linear.linear(x, w), linear.linear(x, w)) < 1e-6
    x[4, 7] += 2.0**-20  # one value that bf16 cannot hold: the three-piece path again
    assert _rel(tri_linear.linear(x, w), linear.linear(x, w)) < 1e-6


@pytest.mark.parametrize("rows", [3, 70])
def test_linear_bf16_x_fp32_out(rows):
    """The logit head: bf16 x, fp32 logits (out_dtype) = the reference on x's fp32 values,
    and the same numbers as the fp32-x path (exact products, fp32 sums); both backends."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(rows, 96, generator=g).to(torch.bfloat16)
    w = torch.randn(40, 96, generator=g).to(torch.bfloat16)
    out = tri_linear.linear(x, w, out_dtype=torch.float32)
    ref = linear.linear(x, w, out_dtype=torch.float32)
    assert out.dtype == ref.dtype == torch.float32 and out.shape == (rows, 40)
    assert _rel(out, ref) < 1e-6
    assert torch.equal(ref, linear.linear(x.float(), w))
    assert _rel(out, tri_linear.linear(x.float(), w)) < 1e-6


@pytest.mark.parametrize("rows", [3, 70])
@pytest.mark.parametrize("fp8", [False, True])
def test_linear_promoted_is_the_fp32_x_paths_bits(rows, fp8):
    """``promoted`` (the compressor's fp32 projections of bf16 x): the bits of the fp32-x
    kernel on x.float() (same tiles, same promoted loop), without the copy or the device flag;
    the reference ignores the hint (fp64 sums)."""
    g = torch.Generator().manual_seed(10 + rows)
    x = torch.randn(rows, 128, generator=g).to(torch.bfloat16)
    w = torch.randn(64, 128, generator=g).to(torch.bfloat16)
    if fp8:
        w = Fp8BlockWeight(*formats.quantize_fp8_weight(w.float()))
    out = tri_linear.linear(x, w, out_dtype=torch.float32, promoted=True)
    assert out.dtype == torch.float32 and torch.equal(out, tri_linear.linear(x.float(), w))
    ref = linear.linear(x, w, out_dtype=torch.float32, promoted=True)
    assert torch.equal(ref, linear.linear(x.float(), w))
    assert _rel(out, ref) < 1e-6


def test_linear_config_wide_tiles_for_the_head_only():
    """128x256 tiles for bf16 x against a bf16 weight of >= WIDE_BF16_MIN_OUT rows at 65-256
    rows (the head); narrower outputs, FP8 weights, fp32 x and other row counts keep theirs."""
    wide = tri_linear.linear_config(256, 1, False, out_features=129280)
    assert (wide["BM"], wide["BN"], wide["BK"], wide["num_stages"]) == (128, 256, 64, 3)
    assert tri_linear.linear_config(100, 1, False, out_features=129280)["BN"] == 256
    for args, out in (((256, 1, False), 512), ((256, 1, True), 129280),
                      ((256, 3, False), 129280), ((64, 1, False), 129280),
                      ((4096, 1, False), 129280)):
        assert tri_linear.linear_config(*args, out_features=out)["BN"] != 256, (args, out)


def test_linear_split_k_and_quantized_weights():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 128, generator=g)
    w = _fp8_weight(40, 128, g)
    ref = linear.linear(x, w)
    assert _rel(tri_linear.linear(x, w), ref) < 1e-6
    assert _rel(tri_linear.linear(x, w, split_k=3), ref) < 1e-6  # 4 K steps over 3 -> 2 splits
    codes, scale = formats.quantize_fp4_weight(torch.randn(40, 128, generator=g))
    w4 = Mxfp4ExpertWeights(codes[None], scale[None])
    assert _rel(tri_linear.linear(x, w4), linear.linear(x, w4)) < 1e-6


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("rows", [1, 18])
def test_grouped_linear(rows, fp8):
    g = torch.Generator().manual_seed(10 + rows)
    groups, out_features, in_features = 3, 40, 64  # O=40: FP8 32-row tiles straddle groups
    x = torch.randn(rows, groups, in_features, generator=g)
    if fp8:
        w = _fp8_weight(groups * out_features, in_features, g)
    else:
        w = torch.randn(groups * out_features, in_features, generator=g).to(torch.bfloat16)
    out = tri_linear.grouped_linear(x, w)
    ref = linear.grouped_linear(x, w)
    assert out.shape == (rows, groups, out_features) and out.dtype == x.dtype
    assert _rel(out, ref) < 1e-6
    strided = torch.randn(rows, groups, 2 * in_features, generator=g)[..., :in_features]
    assert _rel(tri_linear.grouped_linear(strided, w), linear.grouped_linear(strided, w)) < 1e-6


@pytest.mark.parametrize("shape,rope_dim,dtype,inverse", [
    ((7, 96), 64, torch.float32, False),  # 2-D (KV latent form), 32 copied channels
    ((5, 3, 72), 8, torch.float32, True),  # 3-D, inverse, 3 vectors (not a power of 2)
    ((4, 2, 2, 80), 48, torch.float16, False),  # 4-D, 24 pairs (padded to 32)
    ((3, 17, 64), 64, torch.float32, True),  # no pass-through channels, two head blocks
])
def test_apply_rope(shape, rope_dim, dtype, inverse):
    g = torch.Generator().manual_seed(shape[-1])
    x = torch.randn(shape, generator=g).to(dtype)
    positions = torch.randint(0, 70_000, (shape[0],), generator=g)
    positions[0] = 0
    inv_freq = rope.rope_inv_freq(rope_dim, 10000.0)
    out = tri_rope.apply_rope(x, positions, inv_freq, inverse=inverse)
    ref = rope.apply_rope(x, positions, inv_freq, inverse=inverse)
    assert out.dtype == dtype and out.shape == ref.shape
    assert torch.equal(out[..., :-rope_dim], x[..., :-rope_dim])
    err = (out.double() - ref.double()).abs().max().item()
    tol = 1e-6 if dtype == torch.float32 else 2.0**-10 * ref.abs().max().item()
    assert err <= tol, err


@pytest.mark.parametrize("contiguous", [True, False])
def test_apply_rope_in_place(contiguous):
    """``in_place``: x itself comes back with its last channels rotated exactly as the
    out-of-place op rotates them (the kernel then skips the pass-through copy); an x that does
    not view its rows as (N, H, D) is rotated through a copy. The reference does the same."""
    g = torch.Generator().manual_seed(11)
    base = torch.randn(6, 4, 96, generator=g)
    x = base if contiguous else base.transpose(0, 1).contiguous().transpose(0, 1)
    positions = torch.randint(0, 70_000, (6,), generator=g)
    inv_freq = rope.rope_inv_freq(32, 10000.0)
    want = tri_rope.apply_rope(x, positions, inv_freq, inverse=True)
    for impl in (tri_rope.apply_rope, rope.apply_rope):
        y = x.clone() if contiguous else x.clone().transpose(0, 1).contiguous().transpose(0, 1)
        assert y.is_contiguous() == contiguous
        got = impl(y, positions, inv_freq, inverse=True, in_place=True)
        assert got is y
        assert torch.equal(got, want) if impl is tri_rope.apply_rope \
            else (got - want).abs().max().item() < 1e-6


def test_apply_rope_takes_strided_positions():
    """Positions as a column of a wider buffer (the CUDA graphs' static inputs): the stride
    is honoured (the kernel once read positions[0..N) of the flat buffer: wrong angles)."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(5, 3, 64, generator=g)
    table = torch.randint(0, 70_000, (5, 4), generator=g)
    inv_freq = rope.rope_inv_freq(32, 10000.0)
    out = tri_rope.apply_rope(x, table[:, 1], inv_freq)
    assert (out - rope.apply_rope(x, table[:, 1].contiguous(), inv_freq)).abs().max() < 1e-6


def test_apply_rope_roundtrip_yarn():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 4, 128, generator=g)
    positions = torch.arange(6) * 1000
    inv_freq = rope.rope_inv_freq(64, 10000.0, rope.Yarn(16.0, 4096, 32.0, 1.0))
    back = tri_rope.apply_rope(tri_rope.apply_rope(x, positions, inv_freq), positions, inv_freq,
                               inverse=True)
    assert (back - x).abs().max().item() < 1e-5


def _fp4_input(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(7, 3, 96, generator=g) * torch.logspace(-3, 3, 96)
    x[0, 0, :32] = 0.0  # all-zero block: amax floor
    x[0, 1, :32] = -0.0
    x[1, 0, 32:64] = 1.75  # all-equal block (every element is the amax)
    x[1, 1, 32:64] = -3.0
    x[2, 0, :32] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 4)  # ties
    x[2, 0, 31] = 6.0
    x[2, 1, 32:64] = -x[2, 0, :32]
    x[3, 0, 64:] = torch.randn(32, generator=g) * 1e-30  # tiny values (scales near 2^-100)
    x[3, 1, :32] = 2.0**-130  # below the amax floor (subnormal fp32; 0 in fp16)
    x[4, 2, 5] = -1e-9  # a negative that rounds to -0.0 next to a large value
    x[4, 2, 6] = 1e4
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fake_quant_fp4_bitexact(dtype):
    x = _fp4_input(dtype)
    out = tri_quant_fp4.fake_quant_fp4_ue8m0_block32(x)
    ref = quant.fake_quant_fp4_ue8m0_block32(x)
    assert out.dtype == dtype and out.shape == x.shape
    bits = torch.int16 if dtype != torch.float32 else torch.int32
    assert torch.equal(out.view(bits), ref.view(bits))  # bit patterns, incl. the sign of zero


def test_fake_quant_fp4_non_finite_blocks():
    x = torch.randn(2, 64)
    x[0, 3] = float("nan")
    x[1, 40] = float("inf")
    out = tri_quant_fp4.fake_quant_fp4_ue8m0_block32(x)
    ref = quant.fake_quant_fp4_ue8m0_block32(x)
    assert torch.equal(out.isnan(), ref.isnan()) and out[0, :32].isnan().all()
    assert torch.equal(out[~ref.isnan()], ref[~ref.isnan()])


def test_registered(monkeypatch):
    from deepinfer.kernels import registry
    from deepinfer.kernels.triton import register_triton_backend

    registry.ops()  # load the reference backend, then register into a copy (no leak elsewhere)
    monkeypatch.setattr(registry, "_REGISTRY",
                        {op: dict(regs) for op, regs in registry._REGISTRY.items()})
    register_triton_backend()
    h200 = {"device": "cuda", "capability": (9, 0)}
    for op in ("linear", "grouped_linear", "apply_rope", "fake_quant_fp4_ue8m0_block32"):
        assert registry.available_backends(op)[0] == "triton"
        assert registry.choose_backend(op, h200) == "triton"
        assert registry.choose_backend(op, {"device": "cpu"}) == "reference"
    assert registry.choose_backend("linear", {**h200, "weight_format": "fp8_block32"}) == "triton"
    assert registry.choose_backend("linear", {**h200, "weight_format": "mxfp4"}) == "reference"


def test_sm90_compile(sm90_compile):
    # Released shapes: head N=64/256 x O=129280 x I=4096 (fp32 x, bf16 w), wo_a G=8 I=4096 O=1024
    # (FP8 w), rope on (N, 64, 512) with rope dim 64, the fp4 indexer query.
    cases = tri_linear.aot_cases() + tri_rope.aot_cases() + tri_quant_fp4.aot_cases()
    results = sm90_compile(cases)
    for case in cases:  # rope: cosf/sinf keep a 32-B Payne-Hanek table on the local stack
        if "max_stack" in case and results[case["id"]].get("stack") is not None:
            assert results[case["id"]]["stack"] <= case["max_stack"], case["id"]
