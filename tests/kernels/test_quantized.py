"""Quantized weight containers (kernels/quantized.py) and the reference ops that take them.

Oracle: the formats dequantizers (``kernels/formats.py``, what the checkpoint reader used) and
the same reference op called with the dequantized bf16 tensor. Tolerance: exact (bit equality);
dequantization is exact and the ops then see identical operands.
"""

import pytest
import torch

from deepinfer.kernels import formats
from deepinfer.kernels.quantized import Fp8BlockWeight, Fp8Rows, Mxfp4ExpertWeights, dense
from deepinfer.kernels.reference import linear, moe


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# Scale bytes: 3..246 is every exponent exact in bf16 (format tests); ops use weight-like ones.
FULL_RANGE, WEIGHT_RANGE = (3, 247), (112, 122)


def random_fp8_weight(rows: int, cols: int, seed: int,
                      scale_bytes: tuple[int, int] = FULL_RANGE) -> Fp8BlockWeight:
    """Every e4m3 byte except NaN (0x7F, 0xFF), random ue8m0 scale bytes."""
    g = gen(seed)
    codes = torch.randint(0, 255, (rows, cols), dtype=torch.uint8, generator=g)
    codes = torch.where((codes & 0x7F) == 0x7F, codes - 1, codes)
    scale = torch.randint(*scale_bytes, (-(-rows // 32), -(-cols // 32)), dtype=torch.uint8,
                          generator=g)
    return Fp8BlockWeight(codes.view(torch.float8_e4m3fn), scale.view(torch.float8_e8m0fnu))


def random_mxfp4(experts: int, rows: int, cols: int, seed: int,
                 scale_bytes: tuple[int, int] = FULL_RANGE) -> Mxfp4ExpertWeights:
    """Every packed byte (all nibble pairs), random ue8m0 scale bytes."""
    g = gen(seed)
    packed = torch.randint(0, 256, (experts, rows, cols // 2), dtype=torch.uint8, generator=g)
    scale = torch.randint(*scale_bytes, (experts, rows, cols // 32), dtype=torch.uint8,
                          generator=g)
    return Mxfp4ExpertWeights(packed, scale.view(torch.float8_e8m0fnu))


def random_rows(rows: int, cols: int, seed: int) -> Fp8Rows:
    w = torch.randn(rows, cols, generator=gen(seed)) * 3
    return Fp8Rows(*formats.quantize_fp8_rows(w))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int16),
                                                                     b.view(torch.int16))


@pytest.mark.parametrize("shape", [(64, 96), (45, 70), (1, 33), (32, 32)])
def test_fp8_block_dequantize_equals_formats(shape):
    w = random_fp8_weight(*shape, seed=sum(shape))
    want = formats.dequantize_fp8_weight(w.codes, w.scale).to(torch.bfloat16)
    assert same_bits(w.dequantize(), want)
    pow2 = Fp8BlockWeight(w.codes, formats.ue8m0_to_float(w.scale))  # float32 powers of two
    assert same_bits(pow2.dequantize(), want)
    assert w.shape == shape and w.device == torch.device("cpu")
    assert w.nbytes == shape[0] * shape[1] + w.scale.numel()


def test_mxfp4_dequantize_equals_formats_per_expert():
    w = random_mxfp4(3, 40, 96, seed=1)
    got = w.dequantize()
    assert got.shape == (3, 40, 96) == w.shape and got.dtype == torch.bfloat16
    for e in range(3):
        want = formats.dequantize_fp4_weight(w.packed[e].view(torch.int8), w.scale[e])
        assert same_bits(got[e], want.to(torch.bfloat16))
        assert same_bits(w.select(e).dequantize()[0], got[e])
    as_int8 = Mxfp4ExpertWeights(w.packed.view(torch.int8), w.scale)  # the checkpoint's dtype
    assert same_bits(as_int8.dequantize(), got)
    assert (w.num_experts, w.out_features, w.in_features) == (3, 40, 96)
    assert w.nbytes == 3 * 40 * (48 + 3)


def test_fp8_rows_gather_equals_dequantized_table():
    table = random_rows(50, 64, seed=2)
    full = formats.dequantize_fp8_rows(table.codes, table.scale).to(torch.bfloat16)
    assert same_bits(table.dequantize(), full)
    ids = torch.randint(0, 50, (7, 3), generator=gen(3))
    assert same_bits(table[ids], full[ids])


def test_to_moves_codes_and_scales():
    for w in (random_fp8_weight(40, 64, 4), random_mxfp4(2, 32, 64, 5), random_rows(9, 32, 6)):
        moved = w.to("meta")
        assert moved.device.type == "meta" and moved.shape == w.shape
        assert moved.nbytes == w.nbytes  # shapes only: no data needed


def test_containers_reject_mismatched_scales():
    codes = torch.zeros(40, 64, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="scale shape"):
        Fp8BlockWeight(codes, torch.zeros(1, 2, dtype=torch.uint8))
    with pytest.raises(ValueError, match="scale must be ue8m0"):
        Mxfp4ExpertWeights(torch.zeros(2, 8, 16, dtype=torch.uint8),
                           torch.zeros(2, 8, 2, dtype=torch.uint8))
    with pytest.raises(ValueError, match="1-expert"):
        dense(random_mxfp4(2, 32, 64, 7))


def test_linear_ops_take_fp8_weights():
    w = random_fp8_weight(96, 64, seed=8, scale_bytes=WEIGHT_RANGE)
    x = torch.randn(5, 64, generator=gen(9)).bfloat16()
    deq = w.dequantize()
    assert bool(torch.isfinite(linear.linear(x, deq)).all())
    assert same_bits(linear.linear(x, w), linear.linear(x, deq))
    assert same_bits(linear.linear_quant_act(x, w), linear.linear_quant_act(x, deq))
    xg = torch.randn(5, 4, 64, generator=gen(10)).bfloat16()  # 4 groups of 24 output rows
    assert same_bits(linear.grouped_linear(xg, w), linear.grouped_linear(xg, deq))


def test_expert_ops_take_mxfp4_and_dequantize_only_routed_experts(monkeypatch):
    num_experts, dim, inter, n = 6, 64, 32, 9
    w1, w3, w2 = (random_mxfp4(num_experts, rows, cols, seed, WEIGHT_RANGE)
                  for rows, cols, seed in ((inter, dim, 11), (inter, dim, 12), (dim, inter, 13)))
    x = torch.randn(n, dim, generator=gen(14)).bfloat16()
    ids = torch.tensor([[0, 2]] * 5 + [[2, 5]] * 4)
    weights = torch.rand(n, 2, generator=gen(15))
    want = moe.moe_routed_experts(x, ids, weights, w1.dequantize(), w3.dequantize(),
                                  w2.dequantize(), 10.0)
    calls: list[int] = []
    real = Mxfp4ExpertWeights.dequantize

    def counting(self):
        calls.append(self.num_experts)
        return real(self)

    monkeypatch.setattr(Mxfp4ExpertWeights, "dequantize", counting)
    got = moe.moe_routed_experts(x, ids, weights, w1, w3, w2, 10.0)
    assert bool(torch.isfinite(want).all()) and torch.equal(got, want)
    assert calls == [1] * 9  # experts 0, 2, 5: three projections each, one expert at a time
    one = moe.expert_ffn(x, w1.select(2), w3.select(2), w2.select(2), 10.0)
    monkeypatch.undo()
    assert same_bits(one, moe.expert_ffn(x, w1.dequantize()[2], w3.dequantize()[2],
                                         w2.dequantize()[2], 10.0))


def test_shared_expert_takes_fp8_weights():
    dim, inter = 64, 96
    w1, w3, w2 = (random_fp8_weight(rows, cols, seed, WEIGHT_RANGE)
                  for rows, cols, seed in ((inter, dim, 16), (inter, dim, 17), (dim, inter, 18)))
    x = torch.randn(4, dim, generator=gen(19)).bfloat16()
    want = moe.expert_ffn(x, w1.dequantize(), w3.dequantize(), w2.dequantize(), 10.0)
    assert same_bits(moe.expert_ffn(x, w1, w3, w2, 10.0), want)


def test_stacked_rows_only_for_adjacent_weights():
    """``stacked_rows``: a view of both weights when the second's codes and scales directly
    follow the first's in one storage; None for separate tensors, the reverse order, or a
    row count off the 32-row scale tiles."""
    from deepinfer.kernels.quantized import stacked_rows

    a, b = random_fp8_weight(64, 96, 1), random_fp8_weight(64, 96, 2)
    assert stacked_rows(a, b) is None  # separate storages
    codes, scale = torch.cat([a.codes.view(torch.uint8), b.codes.view(torch.uint8)]), \
        torch.cat([a.scale.view(torch.uint8), b.scale.view(torch.uint8)])
    codes, scale = codes.view(torch.float8_e4m3fn), scale.view(torch.float8_e8m0fnu)
    top, bottom = Fp8BlockWeight(codes[:64], scale[:2]), Fp8BlockWeight(codes[64:], scale[2:])
    both = stacked_rows(top, bottom)
    assert both is not None and both.codes.shape == (128, 96) and both.scale.shape == (4, 3)
    assert torch.equal(both.dequantize(), torch.cat([a.dequantize(), b.dequantize()]))
    assert both.codes.data_ptr() == top.codes.data_ptr()  # a view, no copy
    assert stacked_rows(bottom, top) is None  # the reverse order
    assert stacked_rows(top, Fp8BlockWeight(codes[64:], scale[2:].clone())) is None
    odd = torch.cat([a.codes.view(torch.uint8)[:48]] * 2).view(torch.float8_e4m3fn)
    odd_scale = torch.cat([a.scale.view(torch.uint8)[:2]] * 2).view(torch.float8_e8m0fnu)
    assert stacked_rows(Fp8BlockWeight(odd[:48], odd_scale[:2]),
                        Fp8BlockWeight(odd[48:], odd_scale[2:])) is None  # 48 rows: 1.5 tiles


def test_fp8_block_weight_bf16_twin():
    """The optional bf16 twin: checked against the codes' shape and dtype, counted in
    ``nbytes``, moved by ``to``; ``stacked_rows`` stacks the twins only where they lie like the
    codes (else the stacked weight has none)."""
    from deepinfer.kernels.quantized import stacked_rows

    a, b = random_fp8_weight(64, 96, 1, (100, 140)), random_fp8_weight(64, 96, 2, (100, 140))
    da, db = a.dequantize(), b.dequantize()
    with pytest.raises(ValueError, match="bf16 twin"):
        Fp8BlockWeight(a.codes, a.scale, da.float())
    with pytest.raises(ValueError, match="bf16 twin"):
        Fp8BlockWeight(a.codes, a.scale, da[:32])
    twin = Fp8BlockWeight(a.codes, a.scale, da)
    assert twin.nbytes == a.nbytes + 64 * 96 * 2
    moved = twin.to("cpu")
    assert moved.bf16 is not None and torch.equal(moved.bf16, da)
    codes = torch.cat([a.codes.view(torch.uint8), b.codes.view(torch.uint8)]).view(
        torch.float8_e4m3fn)
    scale = torch.cat([a.scale.view(torch.uint8), b.scale.view(torch.uint8)]).view(
        torch.float8_e8m0fnu)
    twins = torch.cat([da, db])
    top, bottom = (Fp8BlockWeight(codes[:64], scale[:2], twins[:64]),
                   Fp8BlockWeight(codes[64:], scale[2:], twins[64:]))
    both = stacked_rows(top, bottom)
    assert both is not None and both.bf16 is not None
    assert torch.equal(both.bf16, both.dequantize())
    assert both.bf16.data_ptr() == twins.data_ptr()  # a view
    apart = stacked_rows(top, Fp8BlockWeight(codes[64:], scale[2:], db.clone()))
    assert apart is not None and apart.bf16 is None
