"""Unit-level oracle: our torch reference primitives vs transformers' DeepseekV4 components.

transformers ships DeepSeek-V4 (not V4.1), so per model-spec §7 it is only a *unit* oracle for
the components the two versions share: RMSNorm, interleaved tail RoPE + YaRN, sink attention,
the mHC coefficient math, the sqrtsoftplus router, clamped SwiGLU, the grouped output projection
and the indexer scorer. Every HF module is instantiated with V4.1-like tiny shapes (hidden 256,
4 heads x 64, rope dim 16, hc_mult 4, eps 1e-20, YaRN factor 4 / original 32) and, for RoPE, also
with the released values (theta 160000, factor 16, original 65536, rope dim 64).

Conventions bridged here (HF vs ours):
* HF attention takes q as (B, H, S, D) and one KV head (B, 1, T, D); ours takes (N, H, D) and
  explicit key lists, so the HF additive mask is built from our index lists.
* HF's rotary module returns cos/sin in the dtype of its first argument (bf16 in a bf16 model, a
  HF-only rounding); we always ask for fp32 cos/sin, which is what the reference uses.
* HF's DeepseekV4HyperConnection does not return ``pre`` (it collapses with it at the same site,
  the V4 wiring); we read it off the first ``torch.sigmoid`` of its forward.
* HF applies the routing weight after the expert's down projection and does no activation FP8
  quantization; ours (like REF41) weights before ``w2`` and fake-quantizes GEMM inputs.

Precision: every reduction of our reference accumulates in fp64 and rounds once (so that it is
independent of batch shape and summation order), while HF reduces in fp32. Where no reduction is
involved (RoPE frequencies and rotation, SwiGLU with limit) results are bit-identical and compared
with ``torch.equal``; where one is, the allowed difference is HF's own fp32 rounding error, and
for bf16 outputs one bf16 rounding on top of it. Each tolerance is justified where it is used.
"""

import math
import types

import pytest
import torch
from torch.overrides import TorchFunctionMode

hf = pytest.importorskip("transformers.models.deepseek_v4.modeling_deepseek_v4")
from transformers.models.deepseek_v4.configuration_deepseek_v4 import (  # noqa: E402
    DeepseekV4Config,
)

from deepinfer.kernels.reference import (  # noqa: E402
    attention,
    indexer,
    linear,
    mhc,
    moe,
    norm,
    quant,
    rope,
)

EPS32 = 2.0**-23  # fp32 machine epsilon (ulp of 1.0)
BF16_REL = 2.0**-8  # bf16 rounding: |round(v) - v| <= half an ulp <= 2^-8 * |v|

TINY_YARN = rope.Yarn(factor=4.0, original_max_position=32, beta_fast=32.0, beta_slow=1.0)
RELEASED_YARN = rope.Yarn(factor=16.0, original_max_position=65536, beta_fast=32.0, beta_slow=1.0)


def _config(rope_dim: int = 16, yarn: rope.Yarn = TINY_YARN, **overrides) -> DeepseekV4Config:
    """A DeepseekV4Config with V4.1-like tiny shapes (model-spec §6.1) and overridden eps."""
    head_dim = 64 if rope_dim == 16 else 512
    kwargs = dict(
        vocab_size=512, hidden_size=256, num_hidden_layers=1, num_attention_heads=4,
        head_dim=head_dim, partial_rotary_factor=rope_dim / head_dim, q_lora_rank=64,
        o_groups=2, o_lora_rank=32, layer_types=["compressed_sparse_attention"],
        mlp_layer_types=["moe"], n_routed_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=64, index_n_heads=16, index_head_dim=32, index_topk=6,
        hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-20, swiglu_limit=0.5,
        routed_scaling_factor=1.5, rope_theta=10000.0, compress_rope_theta=160000.0,
        max_position_embeddings=int(yarn.factor * yarn.original_max_position),
        rope_parameters={
            "rope_type": "yarn", "factor": yarn.factor,
            "original_max_position_embeddings": yarn.original_max_position,
            "beta_fast": yarn.beta_fast, "beta_slow": yarn.beta_slow,
        },
    )
    kwargs.update(overrides)
    config = DeepseekV4Config(**kwargs)
    config._experts_implementation = "eager"  # standalone DeepseekV4Experts: plain loop
    return config


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _bf16_randn(*shape: int, gen: torch.Generator, std: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * std).to(torch.bfloat16)


def _assert_bf16_neighbours(got: torch.Tensor, expected: torch.Tensor, max_fraction: float):
    """Two bf16 roundings of values that differ by a few fp32 ulp (an fp64-accumulated result vs
    HF's fp32 one): equal, or adjacent bf16 values (<= 1 bf16 ulp <= 2^-7 relative) where the
    exact value sits next to a bf16 rounding boundary - which happens for about 2^-13 of the
    elements, so ``max_fraction`` of them at most."""
    assert got.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected.float(), rtol=2.0**-7, atol=0.0)
    assert (got != expected).float().mean().item() <= max_fraction


def _ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|bit(a) - bit(b)| for positive fp32 tensors = distance in units in the last place."""
    return (a.float().view(torch.int32).long() - b.float().view(torch.int32).long()).abs()


# ---------------------------------------------------------------------------------------------
# RMSNorm
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_vs_hf(dtype):
    gen = _gen(0)
    x = torch.randn(40, 256, generator=gen) * 3
    x[0] = 0.0  # all-zero row: rsqrt(0 + 1e-20) must not produce NaN
    x[1] *= 1e-8  # mean(x^2) ~ 1e-16 >> eps
    x[2] *= 1e-11  # mean(x^2) ~ 1e-22 << eps = 1e-20: eps dominates, placement inside the rsqrt
    x[3] *= 1e4
    x = x.to(dtype)
    weight = (1 + 0.1 * torch.randn(256, generator=gen)).to(torch.bfloat16)  # bf16 on disk
    module = hf.DeepseekV4RMSNorm(256, eps=1e-20)  # HF keeps norm weights in fp32
    with torch.no_grad():
        module.weight.copy_(weight.float())
        expected = module(x)
    got = norm.rms_norm(x, weight, 1e-20)
    assert got.dtype == dtype
    # Same op sequence (upcast, mean(x^2), rsqrt(var + eps), multiply by the fp32 weight, one
    # cast) except that our mean(x^2) is accumulated in fp64 and rounded once, HF's in fp32 (a
    # 256-term fp32 sum: a few ulp). rsqrt halves that relative error and the two multiplies
    # round identically, so fp32 outputs agree to a few ulp (measured: <= 3 ulp, on 11% of the
    # elements); 8 ulp leaves margin and still rejects e.g. a bf16 rounding of the normalized x
    # before the weight multiply (HF41's deviation, 2^-9 relative).
    if dtype == torch.float32:
        torch.testing.assert_close(got, expected, rtol=8 * EPS32, atol=0.0)
    else:
        _assert_bf16_neighbours(got, expected, max_fraction=1e-3)
    assert torch.count_nonzero(got[0]) == 0


# ---------------------------------------------------------------------------------------------
# RoPE / YaRN
# ---------------------------------------------------------------------------------------------

# (rope_dim, layer type in HF, yarn or None for the plain main rope, theta)
ROPE_CASES = {
    "tiny_main": (16, "main", None, 10000.0),
    "tiny_compress": (16, "compress", TINY_YARN, 160000.0),
    "released_main": (64, "main", None, 10000.0),
    "released_compress": (64, "compress", RELEASED_YARN, 160000.0),
}


def _hf_rotary(rope_dim: int, yarn: rope.Yarn | None) -> torch.nn.Module:
    config = _config(rope_dim, yarn or (TINY_YARN if rope_dim == 16 else RELEASED_YARN))
    return hf.DeepseekV4RotaryEmbedding(config)


def _hf_rotate(rotary, layer_type: str, x: torch.Tensor, positions: torch.Tensor,
               inverse: bool = False) -> torch.Tensor:
    """HF rotation of x (N, H, D) at positions (N,), using fp32 cos/sin."""
    cos, sin = rotary(torch.zeros(1, dtype=torch.float32), positions[None], layer_type=layer_type)
    if inverse:  # what DeepseekV4Attention does to the attention output
        sin = -sin
    # apply_rotary_pos_emb wants (B, H, S, D) with cos/sin (B, S, R/2)
    return hf.apply_rotary_pos_emb(x[None].transpose(1, 2), cos, sin).transpose(1, 2)[0]


@pytest.mark.parametrize("case", list(ROPE_CASES))
def test_rope_inv_freq_vs_hf(case):
    rope_dim, layer_type, yarn, theta = ROPE_CASES[case]
    rotary = _hf_rotary(rope_dim, yarn)
    # YaRN magnitude scaling must be off (V4/V4.1 have no mscale): cos/sin multiplied by 1.0.
    assert getattr(rotary, f"{layer_type}_attention_scaling") == 1.0
    expected = getattr(rotary, f"{layer_type}_inv_freq")
    got = rope.rope_inv_freq(rope_dim, theta, yarn)
    assert got.dtype == torch.float32 and got.shape == expected.shape == (rope_dim // 2,)
    # HF computes the interpolated frequency as 1/(F * theta^x) and blends with weights
    # (1 - (1 - ramp), 1 - ramp); ours uses (1/theta^x)/F and (ramp, 1 - ramp). With F a power
    # of two both are exact, so at most last-ulp differences from the blend weights are allowed
    # (model-spec §7); measured: 0 ulp for all four configurations.
    assert _ulp_distance(got, expected).max() <= 2
    if yarn is not None:
        # The two ends of the ramp are exact in both: unscaled (long-wavelength ramp 0) pairs
        # and fully divided pairs. Spec §2.1: released lo=15, hi=25; tiny lo=0, hi=2.
        lo, hi = (15, 25) if rope_dim == 64 else (0, 2)
        plain = rope.rope_inv_freq(rope_dim, theta)
        assert torch.equal(got[: lo + 1], plain[: lo + 1])
        assert torch.equal(got[hi:], plain[hi:] / yarn.factor)
        assert torch.equal(expected[: lo + 1], got[: lo + 1])
        assert torch.equal(expected[hi:], got[hi:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", list(ROPE_CASES))
def test_rope_rotation_vs_hf(case, dtype):
    rope_dim, layer_type, yarn, theta = ROPE_CASES[case]
    rotary = _hf_rotary(rope_dim, yarn)
    head_dim = 64 if rope_dim == 16 else 512
    gen = _gen(1)
    positions = torch.tensor(
        [0, 1, 2, 3, 31, 32, 127, 128, 4095, 65535, 65536, 65537, 99_999, 100_000, 131_071])
    positions = torch.cat((positions, torch.randint(0, 100_001, (17,), generator=gen)))
    x = (torch.randn(len(positions), 4, head_dim, generator=gen) * 2).to(dtype)

    hf_inv_freq = getattr(rotary, f"{layer_type}_inv_freq")
    expected = _hf_rotate(rotary, layer_type, x, positions)
    # Same frequencies -> same fp32 angle, cos, sin; HF's x*cos + rotate_half(x)*sin performs the
    # same products/sums as ours (negation is exact, addition commutes), one cast: exact.
    assert torch.equal(rope.apply_rope(x, positions, hf_inv_freq), expected)

    # End to end, each with its own frequencies. A frequency difference df moves the angle by at
    # most pos*df, i.e. the rotated values by <= |x| * pos * df (plus one output rounding).
    got = rope.apply_rope(x, positions, rope.rope_inv_freq(rope_dim, theta, yarn))
    df = (rope.rope_inv_freq(rope_dim, theta, yarn) - hf_inv_freq).abs().max().item()
    amax = x.float().abs().max().item()
    atol = 2 * amax * positions.max().item() * df + 4 * EPS32 * amax
    rtol = BF16_REL if dtype == torch.bfloat16 else 0.0
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)
    # channels before the rope tail are untouched
    assert torch.equal(got[..., :-rope_dim], x[..., :-rope_dim])


@pytest.mark.parametrize("case", ["tiny_compress", "released_compress", "released_main"])
def test_inverse_rope_undoes_hf_rotation(case):
    rope_dim, layer_type, yarn, theta = ROPE_CASES[case]
    rotary = _hf_rotary(rope_dim, yarn)
    head_dim = 64 if rope_dim == 16 else 512
    gen = _gen(2)
    positions = torch.cat((torch.tensor([0, 1, 65535, 65536, 99_999, 100_000]),
                           torch.randint(0, 100_001, (26,), generator=gen)))
    x = torch.randn(len(positions), 4, head_dim, generator=gen) * 2
    inv_freq = rope.rope_inv_freq(rope_dim, theta, yarn)

    rotated = _hf_rotate(rotary, layer_type, x, positions)
    # Our inverse rotation is bit-identical to HF's output de-rotation (cos, -sin): same angle,
    # cos/sin of a negated angle are the exact negation-symmetric values.
    assert torch.equal(rope.apply_rope(rotated, positions, inv_freq, inverse=True),
                       _hf_rotate(rotary, layer_type, rotated, positions, inverse=True))
    # Round trip HF forward -> ours inverse recovers x up to fp32 rounding: two rotations, each
    # a few ulp of the largest element, and cos^2 + sin^2 = 1 only to ~1 ulp. 16 ulp of |x|max.
    back = rope.apply_rope(rotated, positions, inv_freq, inverse=True)
    torch.testing.assert_close(back, x, rtol=0.0, atol=16 * EPS32 * x.abs().max().item())
    # and the rotation was not a no-op at these positions
    assert (rotated - x).abs().max() > 0.5


# ---------------------------------------------------------------------------------------------
# Sparse attention with sink
# ---------------------------------------------------------------------------------------------


def _hf_sink_attention(q, kv, indices, sink, scale):
    """eager_attention_forward on fp32 copies with an additive mask built from index lists."""
    n, h, _ = q.shape
    mask = torch.full((n, kv.shape[0]), float("-inf"))
    rows = torch.arange(n)[:, None].expand_as(indices)
    valid = indices >= 0
    mask[rows[valid], indices[valid]] = 0.0
    module = types.SimpleNamespace(sinks=sink.float(), num_key_value_groups=h, training=False)
    out, _ = hf.eager_attention_forward(
        module, q.float().transpose(0, 1)[None], kv.float()[None, None], kv.float()[None, None],
        mask[None, None], scale)
    return out[0]  # (S, H, D)


def _assert_attention_close(got, expected, kv):
    # HF runs in fp32 (logits GEMM, softmax, probs @ V), ours accumulates in fp64: HF's rounding
    # error, i.e. a few ulp of the largest |V| entry, which the outputs are convex-ish
    # combinations of (measured <= 1.1e-6 for |V|max ~ 4; 8 ulp of |V|max is ~4e-6).
    atol = 8 * EPS32 * kv.float().abs().max().item()
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=atol)
    else:
        # plus one rounding of ours to bf16: half a bf16 ulp <= 2^-8 relative
        torch.testing.assert_close(got.float(), expected, rtol=BF16_REL + 1e-5, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sink_attention_dense_causal_vs_hf(dtype):
    gen = _gen(3)
    n, h, d = 24, 4, 64
    q = torch.randn(n, h, d, generator=gen).to(dtype)
    kv = torch.randn(n, d, generator=gen).to(dtype)
    sink = torch.randn(h, generator=gen) + 1.0  # comparable to the logits: the sink matters
    cols = torch.arange(n)[None, :].expand(n, n)
    indices = torch.where(cols <= torch.arange(n)[:, None], cols, -1)  # all causal keys
    got = attention.sparse_attention_sink(q, kv, indices, sink, d**-0.5)
    assert got.dtype == dtype
    # HF's own causal mask (triu -inf) must be what our index lists describe
    expected = _hf_sink_attention(q, kv, indices, sink, d**-0.5)
    module = types.SimpleNamespace(sinks=sink, num_key_value_groups=h, training=False)
    causal = torch.full((n, n), float("-inf")).triu(1)[None, None]
    direct, _ = hf.eager_attention_forward(
        module, q.float().transpose(0, 1)[None], kv.float()[None, None], kv.float()[None, None],
        causal, d**-0.5)
    assert torch.equal(direct[0], expected)
    _assert_attention_close(got, expected, kv)
    # the sink is not negligible here (dropping it would fail the tolerance above)
    no_sink = attention.sparse_attention_sink(q.float(), kv.float(), indices,
                                              torch.full((h,), -1e30), d**-0.5)
    assert (no_sink - expected).abs().max() > 1e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sink_attention_sparse_lists_vs_hf(dtype):
    """Random causal subsets in random slots, -1 padded, one empty list (output 0)."""
    gen = _gen(4)
    n, m, h, d, k = 20, 48, 4, 64, 10
    q = (torch.randn(n, h, d, generator=gen) * 2).to(dtype)  # sharper softmax
    kv = torch.randn(m, d, generator=gen).to(dtype)
    sink = torch.randn(h, generator=gen)
    indices = torch.full((n, k), -1)
    for i in range(n):
        visible = 28 + i  # query i may see rows 0 .. 28+i-1
        take = int(torch.randint(1, k + 1, (1,), generator=gen))
        rows = torch.randperm(visible, generator=gen)[:take]
        slots = torch.randperm(k, generator=gen)[:take]
        indices[i, slots] = rows
    indices[5] = -1  # no valid row: the sink alone -> exactly 0
    got = attention.sparse_attention_sink(q, kv, indices, sink, d**-0.5)
    expected = _hf_sink_attention(q, kv, indices, sink, d**-0.5)
    assert torch.count_nonzero(got[5]) == 0 and torch.count_nonzero(expected[5]) == 0
    _assert_attention_close(got, expected, kv)


# ---------------------------------------------------------------------------------------------
# mHC
# ---------------------------------------------------------------------------------------------


class _CaptureSigmoid(TorchFunctionMode):
    """Records torch.sigmoid outputs: in DeepseekV4HyperConnection.forward the first one is
    pre - hc_eps, the second post / 2."""

    def __init__(self):
        super().__init__()
        self.outputs = []

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.sigmoid:
            self.outputs.append(out)
        return out


def _hf_hc(hc_eps: float, seed: int):
    config = _config(hc_eps=hc_eps)
    s, d = config.hc_mult, config.hidden_size
    gen = _gen(seed)
    module = hf.DeepseekV4HyperConnection(config).to(torch.float32)
    with torch.no_grad():
        module.fn.copy_(torch.randn((2 + s) * s, s * d, generator=gen) * 0.05)  # |m| ~ 1.6
        module.base.copy_(torch.randn((2 + s) * s, generator=gen) * 0.5)
        module.scale.copy_(torch.tensor([0.8, 1.2, 2.0]))
    x = torch.randn(16, s, d, generator=gen)
    x[0] = 0.0  # zero streams: r = 1e10, m = 0, coefficients from base only
    x[1] *= 1e-12  # mean(v^2) ~ 1e-24 < norm eps 1e-20
    x[2] *= 50.0
    x = x.to(torch.bfloat16)
    with torch.no_grad(), _CaptureSigmoid() as capture:
        post, comb, collapsed = module(x[None])
    assert len(capture.outputs) == 2
    pre = capture.outputs[0][0] + config.hc_eps  # exactly HF's `pre`
    return config, module, x, pre, post[0], comb[0], collapsed[0]


@pytest.mark.parametrize("hc_eps", [1e-6, 1e-2])
def test_hc_coeffs_vs_hf_hyperconnection(hc_eps):
    config, module, x, pre_hf, post_hf, comb_hf, _ = _hf_hc(hc_eps, seed=5)
    pre, post, comb = mhc.hc_coeffs(x, module.fn.detach(), module.scale.detach(),
                                    module.base.detach(), config.rms_norm_eps, config.hc_eps,
                                    config.hc_sinkhorn_iters)
    # HF normalizes the flattened streams before projecting (x*r) @ fn^T; ours/REF41 project
    # then scale (x @ fn^T) * r. Same math, different fp32 rounding of m (measured <= 5e-7 in the
    # coefficients after sigmoid / softmax / 20 Sinkhorn rounds, all of which are at most
    # 1-Lipschitz here). 5e-6 is 10x that; the hc_eps=1e-2 case makes every eps placement
    # (pre + eps, softmax + eps, the +eps of each Sinkhorn division) visible far above it.
    tol = dict(rtol=0.0, atol=5e-6)
    torch.testing.assert_close(pre, pre_hf, **tol)
    torch.testing.assert_close(post, post_hf, **tol)
    # comb[n, i, j] = input stream i -> output stream j in both (HF mixes with comb^T @ streams)
    torch.testing.assert_close(comb, comb_hf, **tol)
    # preconditions that make the comparison discriminating
    assert (comb - comb.transpose(-1, -2)).abs().max() > 0.1  # a transposition would fail
    assert pre.min() < 0.3 and pre.max() > 0.7 and post.min() < 0.6 and post.max() > 1.4


def test_hc_collapse_vs_hf_collapsed():
    # HF collapses with the same-site pre (V4 wiring); as a function of (x, pre) it is ours.
    _, _, x, pre_hf, _, _, collapsed_hf = _hf_hc(1e-6, seed=6)
    got = mhc.hc_collapse(x, pre_hf)
    # sum_i pre_i * x_i over the 4 streams, then one bf16 cast; ours sums in fp64, HF in fp32
    # (a few fp32 ulp), so the bf16 results are equal or neighbours at rounding boundaries.
    _assert_bf16_neighbours(got, collapsed_hf, max_fraction=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hc_expand_vs_hf_layer_mixing(dtype):
    """Our expand vs DeepseekV4DecoderLayer's `post*out + comb^T @ streams`, evaluated in fp32.

    (HF casts post/comb to the activation dtype before mixing - an HF-only rounding that REF41
    does not do - so its formula is evaluated here on fp32 copies.)"""
    _, _, x, _, post, comb, _ = _hf_hc(1e-6, seed=7)
    out = _bf16_randn(x.shape[0], x.shape[-1], gen=_gen(8))
    x, out = x.to(dtype), out.to(dtype)
    expected = post.unsqueeze(-1) * out.float().unsqueeze(-2) + torch.matmul(
        comb.transpose(-1, -2), x.float())
    got = mhc.hc_expand(out, x, post, comb)
    assert got.dtype == dtype
    # HF's formula in fp32: 5 products and 4 additions, each rounded, with cancellation between
    # streams, so its error is a few ulp of the largest term, not of the result.
    scale = x.float().abs().amax(dim=1, keepdim=True) + 2 * out.float().abs()[:, None]
    atol = 8 * EPS32 * scale
    if dtype == torch.float32:
        assert ((got - expected).abs() <= atol).all()
    else:
        # plus one bf16 rounding of ours (fp64-exact before the cast)
        assert ((got.float() - expected).abs() <= atol + BF16_REL * expected.abs()).all()


# ---------------------------------------------------------------------------------------------
# MoE: router, clamped SwiGLU, experts
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_experts", "topk"), [(8, 2), (32, 6)])
def test_route_sqrtsoftplus_vs_hf_topk_router(n_experts, topk):
    config = _config(n_routed_experts=n_experts, num_experts_per_tok=topk)
    gen = _gen(9)
    n, d = 96, config.hidden_size
    x = _bf16_randn(n, d, gen=gen)
    gate = _bf16_randn(n_experts, d, gen=gen, std=0.05)
    bias = torch.randn(n_experts, generator=gen) * 0.3
    router = hf.DeepseekV4TopKRouter(config)
    with torch.no_grad():
        router.weight.copy_(gate.float())
        router.e_score_correction_bias.copy_(bias)
        _, w_hf, idx_hf = router(x.float()[None])
    # text-only, gate_temp 1: V4.1's gate == V4's non-hash gate (model-spec §7)
    w, idx = moe.route_sqrtsoftplus(x, gate, bias, None, None, topk, 1.5, gate_temp=1.0)

    # preconditions: the bias steers selection for some tokens, and there is no near-tie at the
    # top-k cut (tie-breaking is implementation-defined: HF topk vs our stable sort)
    scores = torch.sqrt(torch.nn.functional.softplus(x.float() @ gate.float().t()))
    unbiased = scores.topk(topk).indices.sort(-1).values
    biased = (scores + bias).sort(-1, descending=True).values
    assert (biased[:, topk - 1] - biased[:, topk]).min() > 1e-5
    assert (unbiased != idx.sort(-1).values).any(-1).sum() >= n // 10

    # HF returns the picks unsorted: compare as sets, weights aligned by expert id.
    ids, order = idx.sort(-1)
    ids_hf, order_hf = idx_hf.sort(-1)
    assert torch.equal(ids, ids_hf)
    w, w_hf = w.gather(1, order), w_hf.gather(1, order_hf)
    # Same sqrt(softplus), gather, (sum + 1e-20), divide, * 1.5. The logits differ by HF's fp32
    # GEMM error (256 terms of |x w| ~ 0.05: ~1e-7 absolute; ours is fp64-accumulated), which
    # sqrt(softplus) and the normalization pass on at <= 1x relative; plus a few ulp from the
    # order of the top-k sum. Measured <= 3e-7 relative; 1e-5 leaves margin.
    torch.testing.assert_close(w, w_hf, rtol=1e-5, atol=0.0)


@pytest.mark.parametrize("limit", [0.5, 10.0])
def test_swiglu_limit_vs_hf_apply_gate(limit):
    config = _config(swiglu_limit=limit)
    gen = _gen(10)
    inter = config.moe_intermediate_size
    gate_up = _bf16_randn(64, 2 * inter, gen=gen, std=2 * limit).float()
    experts = hf.DeepseekV4Experts(config)
    expected = experts._apply_gate(gate_up)
    gate, up = gate_up[:, :inter], gate_up[:, inter:]
    got = moe.swiglu_limit(gate, up, limit)
    # min(gate, limit), clamp(up, +-limit), product: the same fp32 ops; silu ours in fp64 rounded
    # once (row-invariant, tests/kernels/test_reference_row_invariance.py), HF's fp32 (~1 ulp)
    torch.testing.assert_close(got, expected, rtol=5e-7, atol=0.0)
    # the clamps are really exercised: gate above, up above and below the limit
    assert (gate > limit).sum() > 100 and (up > limit).sum() > 100 and (up < -limit).sum() > 100
    # and the gate is clamped on one side only (large negative gates pass through silu)
    assert (gate < -limit).sum() > 100


def _route_for_experts(config, x, gen):
    gate = _bf16_randn(config.n_routed_experts, config.hidden_size, gen=gen, std=0.05)
    bias = torch.randn(config.n_routed_experts, generator=gen) * 0.3
    return moe.route_sqrtsoftplus(x, gate, bias, None, None, config.num_experts_per_tok,
                                  config.routed_scaling_factor)


def _hf_experts(config, gen):
    e, i, d = config.n_routed_experts, config.moe_intermediate_size, config.hidden_size
    w1 = _bf16_randn(e, i, d, gen=gen, std=0.1)
    w3 = _bf16_randn(e, i, d, gen=gen, std=0.1)
    w2 = _bf16_randn(e, d, i, gen=gen, std=0.1)
    experts = hf.DeepseekV4Experts(config)
    with torch.no_grad():
        experts.gate_up_proj.copy_(torch.cat((w1, w3), dim=1).float())  # [gate; up] rows
        experts.down_proj.copy_(w2.float())
    return experts, w1, w3, w2


@pytest.mark.parametrize("limit", [0.5, 10.0])
def test_routed_and_shared_experts_compose_vs_hf(limit):
    """Oracle for the expert math without FP8: ours composed from `linear` + `swiglu_limit` +
    routing weight (applied BEFORE w2, as REF41) vs DeepseekV4Experts (weight AFTER w2)."""
    config = _config(swiglu_limit=limit)
    gen = _gen(11)
    x = _bf16_randn(64, config.hidden_size, gen=gen)
    weights, ids = _route_for_experts(config, x, gen)
    experts, w1, w3, w2 = _hf_experts(config, gen)
    with torch.no_grad():
        expected = experts(x.float(), ids, weights)

    x32 = x.float()
    got = torch.zeros_like(expected)
    for e in range(config.n_routed_experts):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        h = moe.swiglu_limit(linear.linear(x32[tok], w1[e]), linear.linear(x32[tok], w3[e]), limit)
        got.index_add_(0, tok, linear.linear(weights[tok, slot, None] * h, w2[e]))
    # HF is fp32 throughout; ours rounds each fp64-accumulated GEMM to fp32 and scales before
    # instead of after the down projection: rounding only, HF's error dominating - a few ulp of
    # the largest output (measured 2e-6 at |out| <= 9.4, i.e. ~2 ulp); allowed 16 ulp.
    tol = dict(rtol=1e-5, atol=16 * EPS32 * expected.abs().max().item())
    torch.testing.assert_close(got, expected, **tol)

    # shared expert (DeepseekV4MLP): same clamped SwiGLU, no routing weight
    mlp = hf.DeepseekV4MLP(config)
    with torch.no_grad():
        mlp.gate_proj.weight.copy_(w1[0].float())
        mlp.up_proj.weight.copy_(w3[0].float())
        mlp.down_proj.weight.copy_(w2[0].float())
        expected_shared = mlp(x32)
    h = moe.swiglu_limit(linear.linear(x32, w1[0]), linear.linear(x32, w3[0]), limit)
    got_shared = linear.linear(h, w2[0])
    # same op sequence; GEMM accumulation fp64 (ours) vs fp32 (HF): same tolerance as above
    tol = dict(rtol=1e-5, atol=16 * EPS32 * expected_shared.abs().max().item())
    torch.testing.assert_close(got_shared, expected_shared, **tol)


@pytest.mark.parametrize("limit", [0.5, 10.0])
def test_moe_routed_experts_within_fp8_activation_rounding_of_hf(limit):
    """The reference's routed experts (Q8_32 before each GEMM, bf16 intermediates) vs HF's
    unquantized experts on the same routing.

    Tolerance: e4m3 keeps 3 mantissa bits, so each quantized activation carries up to 2^-4 and
    on average ~2.5% relative error; two quantizations (x before w1/w3, h before w2) plus bf16
    casts give a normwise relative error of ~4.5% (limit 10) to ~7% (limit 0.5, where more of
    the signal comes from small unclamped gates). A 10% bound catches gross errors (a missing,
    doubled or misplaced routing weight changes outputs by 25% or more, swapped w1/w3 by ~100%)
    while accepting FP8 rounding; the lower bound checks that activations are quantized at all.
    Exact expert math is covered by the composed fp32 test above."""
    config = _config(swiglu_limit=limit)
    gen = _gen(12)
    x = _bf16_randn(64, config.hidden_size, gen=gen)
    weights, ids = _route_for_experts(config, x, gen)
    experts, w1, w3, w2 = _hf_experts(config, gen)
    with torch.no_grad():
        expected = experts(x.float(), ids, weights)
    got = moe.moe_routed_experts(x, ids, weights, w1, w3, w2, limit)
    rel = ((got - expected).norm() / expected.norm()).item()
    assert 1e-3 < rel < 0.1, rel


# ---------------------------------------------------------------------------------------------
# Grouped output projection
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("groups", "in_per_group", "out_per_group"), [(2, 128, 32), (8, 64, 16)])
def test_grouped_linear_vs_hf(groups, in_per_group, out_per_group, dtype):
    gen = _gen(13)
    weight = _bf16_randn(groups * out_per_group, in_per_group, gen=gen, std=0.1)  # wo_a layout
    x = _bf16_randn(40, groups, in_per_group, gen=gen).to(dtype)
    module = hf.DeepseekV4GroupedLinear(in_per_group, groups * out_per_group, groups)
    with torch.no_grad():
        module.weight.copy_(weight.float())
        expected = module(x.float())
    got = linear.grouped_linear(x, weight)
    assert got.dtype == dtype and got.shape == (40, groups, out_per_group)
    # HF's fp32 bmm vs our fp64 accumulation: HF's dot-product rounding error, which scales with
    # sum_i |x_i w_i| (~10 here); measured below 1 ulp of it, allowed 4 ulp.
    dot_scale = torch.einsum("ngi,goi->ngo", x.float().abs(),
                             weight.float().abs().view(groups, out_per_group, in_per_group))
    atol = 4 * EPS32 * dot_scale.max().item()
    if dtype == torch.float32:
        torch.testing.assert_close(got, expected, rtol=0.0, atol=atol)
    else:
        # plus one rounding of ours (fp64-exact before the cast) to bf16: <= 2^-8 relative
        torch.testing.assert_close(got.float(), expected, rtol=BF16_REL, atol=atol)


# ---------------------------------------------------------------------------------------------
# Indexer scorer
# ---------------------------------------------------------------------------------------------


def test_index_scores_vs_hf_indexer_scorer():
    config = _config()
    hi, di, d = config.index_n_heads, config.index_head_dim, config.hidden_size
    gen = _gen(14)
    n, t = 48, 40
    x = _bf16_randn(n, d, gen=gen)
    weights_proj = _bf16_randn(hi, d, gen=gen, std=0.05)
    # FP4-grid queries and keys, as in the model (Q4E8_32)
    q = quant.fake_quant_fp4_ue8m0_block32(torch.randn(n, hi, di, generator=gen))
    keys = quant.fake_quant_fp4_ue8m0_block32(torch.randn(t, di, generator=gen))
    scorer = hf.DeepseekV4IndexerScorer(config)
    with torch.no_grad():
        scorer.weights_proj.weight.copy_(weights_proj.float())
        expected = scorer(q[None], keys[None], x.float()[None])[0]  # (S, T)
    # our head weights arrive pre-scaled by index_head_dim^-0.5 * index_n_heads^-0.5 (spec §2.6)
    head_weights = linear.linear(x.float(), weights_proj) * (di**-0.5 * hi**-0.5)
    got = indexer.index_scores(q, head_weights, keys)
    # fp32 both; HF applies di^-0.5 to every relu'd dot and hi^-0.5 to the weights, ours folds
    # both into the weight: reassociation only. Scores are signed sums over 16 heads, so the
    # absolute tolerance is relative to the score scale.
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6 * expected.abs().max().item())
    # the ReLU and signed head weights are really exercised
    dots = torch.einsum("nhd,td->nht", q, keys)
    assert (dots < 0).float().mean() > 0.3
    assert (head_weights < 0).any() and (head_weights > 0).any()


def test_oracle_shapes_match_spec_tiny_config():
    """Guard: the HF config used above really has the V4.1-like tiny shapes it claims."""
    config = _config()
    assert config.qk_rope_head_dim == 16 and config.head_dim == 64
    assert config.rope_parameters["compress"]["attention_factor"] == 1.0
    assert config.rms_norm_eps == 1e-20 and config.hc_mult == 4
    released = _config(64, RELEASED_YARN)
    assert released.qk_rope_head_dim == 64
    assert released.max_position_embeddings == 1048576
    assert math.isclose(released.rope_parameters["compress"]["factor"], 16.0)
