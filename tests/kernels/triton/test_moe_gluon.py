"""The Gluon W4A8 decode expert GEMM (kernels/triton/moe_gluon_w4a8.py) on CPU.

Gluon has no interpreter, so the kernels themselves run only on the GPU
(tests/gpu/test_moe_gluon_gpu.py). Here: the load-time weight orders against torch twins of
what the kernels' registers hold, and the sm_90 compile gate — the layouts must line up so that
the unpacked weights reach the wgmma A operand with no shuffles and no shared-memory round trip.
"""

from __future__ import annotations

import pytest
import torch

from deepinfer.kernels.mxfp4_w4a8_order import (
    TILE_ROWS,
    from_step_tiles,
    tile_row,
    to_step_tiles,
    to_w4a8_words,
)
from deepinfer.kernels.triton import moe_gluon_w4a8


def _natural_values(packed: torch.Tensor) -> torch.Tensor:
    """Checkpoint-order MXFP4 bytes (..., K/2) -> the e2m1 values (..., K)."""
    from deepinfer.kernels.reference.quant import e2m1_decode

    p = packed.to(torch.int64)
    return torch.stack([e2m1_decode(p & 0xF), e2m1_decode(p >> 4)], -1).reshape(
        *packed.shape[:-1], -1)


def _e4m3_bytes(reg: torch.Tensor) -> torch.Tensor:
    """int64 32-bit registers (...) -> their 4 e4m3 bytes as values (..., 4)."""
    b = torch.stack([(reg >> (8 * i)) & 0xFF for i in range(4)], -1).to(torch.uint8)
    return b.view(torch.float8_e4m3fn).float()


def test_w4a8_kernel_order_gives_the_wgmma_fragments():
    """Word 4 q + G of a 128-K step, unpacked by the asm's masks and rotations (torch twin),
    holds the e4m3 codes (value * 2^-6) of K = 32 G + 4 q + b (lo) and 32 G + 16 + 4 q + b (hi):
    every e2m1 value of every position, both signs of zero included."""
    torch.manual_seed(0)
    rows, k = 5, 512
    packed = torch.randint(0, 256, (2, rows, k // 2), dtype=torch.uint8)
    packed[0, 0, :16] = torch.arange(16, dtype=torch.uint8) * 17  # every nibble, both halves
    words = to_w4a8_words(packed).view(torch.int32)  # each row's words (no step tiles)
    words = words.reshape(2, rows, k // 128, 4, 4)  # steps, quad lane q, group G
    lo, hi = moe_gluon_w4a8.unpack_twin(words)
    values = _natural_values(packed)
    for q in range(4):
        for g in range(4):
            base = torch.arange(k // 128)[:, None] * 128 + 32 * g + 4 * q + torch.arange(4)
            want_lo = values[..., base]  # (2, rows, steps, 4)
            want_hi = values[..., base + 16]
            got_lo = _e4m3_bytes(lo[..., q, g]) * 64
            got_hi = _e4m3_bytes(hi[..., q, g]) * 64
            assert torch.equal(got_lo, want_lo) and torch.equal(got_hi, want_hi), (q, g)
            # signed zeros survive (-0 is e4m3 0x80)
            assert torch.equal(torch.signbit(got_lo), torch.signbit(want_lo))


def test_w4a8_kernel_order_is_a_permutation_of_the_bits():
    """Each word holds exactly the 32 bits of its 8 nibbles (no bit lost or duplicated), and
    the per-expert conversion equals the whole-tensor one."""
    torch.manual_seed(1)
    packed = torch.randint(0, 256, (3, 4, 128), dtype=torch.uint8)
    out = to_w4a8_words(packed)
    assert out.shape == packed.shape and out.dtype == torch.uint8
    popcount = lambda t: sum(((t.to(torch.int64) >> i) & 1).sum() for i in range(8))  # noqa
    assert popcount(out) == popcount(packed)
    assert torch.equal(out, torch.stack([to_w4a8_words(p) for p in packed]))
    stack = torch.randint(0, 256, (2, 256, 128), dtype=torch.uint8)
    order = moe_gluon_w4a8.to_kernel_order(stack)
    assert torch.equal(order, torch.stack([moe_gluon_w4a8.to_kernel_order(p) for p in stack]))


def test_w4a8_kernel_order_step_tiles():
    """The kernel order = each row's words in step tiles: the byte of row r, 128-K step s,
    offset j of an expert sits at (r // 128) * 128 * K/2 + s * 8192 + (r % 128) * 64 + j, and a
    TMA box of rows [r0, r0 + R) at step s is row ``tile_row(r0, steps) + 128 s`` of the
    [E * O * K/128, 64] view (the kernels' arithmetic); rows not a multiple of 128 refused."""
    torch.manual_seed(4)
    experts, rows, half = 2, 256, 192
    steps = half // 64
    packed = torch.randint(0, 256, (experts, rows, half), dtype=torch.uint8)
    words = to_w4a8_words(packed)
    order = moe_gluon_w4a8.to_kernel_order(packed)
    flat = order.reshape(-1)
    for e, r, s in ((0, 0, 0), (0, 127, 2), (1, 128, 1), (1, 255, 0), (1, 200, 2)):
        at = e * rows * half + (r // 128) * 128 * half + s * 8192 + (r % 128) * 64
        assert torch.equal(flat[at:at + 64], words[e, r, 64 * s:64 * (s + 1)]), (e, r, s)
    view = order.reshape(-1, 64)
    for r0, box in ((0, 64), (64, 64), (128, 128), (256 + 192, 64)):
        e, r = divmod(r0, rows)
        for s in range(steps):
            got = view[tile_row(r0, steps) + 128 * s:][:box]
            assert torch.equal(got, words[e, r:r + box, 64 * s:64 * (s + 1)]), (r0, s)
    assert torch.equal(from_step_tiles(to_step_tiles(words, 128), 128), words)
    with pytest.raises(AssertionError):
        moe_gluon_w4a8.to_kernel_order(packed[:, :64])


def test_w4a8_kernel_order_gpu_kernel_and_inverse():
    """The one-launch Triton conversion (interpreter here) equals the torch definition, int8
    stacks included, and ``from_kernel_order`` undoes it."""
    torch.manual_seed(3)
    packed = torch.randint(0, 256, (2, 256, 128), dtype=torch.uint8)
    want = moe_gluon_w4a8.to_kernel_order(packed)
    assert torch.equal(moe_gluon_w4a8.to_kernel_order_gpu(packed), want)
    out = torch.empty_like(packed).view(torch.int8)
    got = moe_gluon_w4a8.to_kernel_order_gpu(packed.view(torch.int8), out=out)
    assert got.dtype == torch.int8 and torch.equal(out.view(torch.uint8), want)
    assert torch.equal(moe_gluon_w4a8.from_kernel_order(want), packed)
    with pytest.raises(AssertionError, match="not in place"):
        moe_gluon_w4a8.to_kernel_order_gpu(packed, out=packed)


_W4A8_SIG = {"xc_ptr": "*u8", "xs_ptr": "*u8", "w1_desc": "desc:64x64", "s1_ptr": "*u8",
             "w3_desc": "desc:64x64", "s3_ptr": "*u8", "pairs_ptr": "*i32",
             "block_expert_ptr": "*i32", "out1_ptr": "*fp32", "out3_ptr": "*fp32",
             "num_pairs": "i32", "O": "i32", "K": "i32", "x_row_div": "i32", "stride_xc": "i32",
             "stride_xs4": "i32", "stride_se": "i32", "stride_sn4": "i32", "stride_om": "i32"}


def test_sm90_compile(sm90_compile):
    """The W4A8 decode kernel compiles for sm_90 with no shuffles, no spills, the wgmma count
    of a K step (one m64 n8/16 k32 per 32-K group of each of its two operands), in budget: the
    gated launch and the down one paired on the same loop, 8 and 16 pairs per program."""
    cases = []
    for paired in (False, True):
        for bm in (8, 16):
            cap = moe_gluon_w4a8.register_cap(paired, bm)
            cases.append({"id": f"w4a8_{'down_paired' if paired else 'gated'}_bm{bm}",
                          "gluon": True,
                          "module": "deepinfer.kernels.triton.moe_gluon_w4a8",
                          "kernel": "_w4a8_decode_kernel", "signature": _W4A8_SIG,
                          "constexprs": {"STAGES": 4, "BM": bm, "TILE": TILE_ROWS,
                                         "PAIRED": paired, "num_warps": 4},
                          "num_warps": 4, "num_stages": 1, "no_spill": True,
                          **({"maxnreg": cap} if cap else {}),
                          "expect_wgmma": True, "wgmma_per_step": 8,
                          "divisible": ["K", "O"]})
    convert = {"id": "w4a8_kernel_order_convert", "kernel": "_kernel_order_kernel",
               "module": "deepinfer.kernels.triton.moe_gluon_w4a8",
               "signature": {"src_ptr": "*u8", "dst_ptr": "*i32", "num_words": "i64",
                             "words_per_row": "i32"},
               "constexprs": {"BLOCK": moe_gluon_w4a8.CONVERT_BLOCK, "TILE": TILE_ROWS},
               "num_warps": 4,
               "num_stages": 1, "no_spill": True, "wgmma_per_step": 0}
    swiglu = [{"id": f"swiglu_q8_bf16{'_fake' if fake else ''}{'' if rw else '_norw'}",
               "kernel": "_swiglu_q8_kernel", "module": "deepinfer.kernels.triton.moe_swiglu",
               "signature": {"g_ptr": "*bf16", "u_ptr": "*bf16", "rw_ptr": "*fp32",
                             "codes_ptr": "*bf16" if fake else "*u8", "scale_ptr": "*u8",
                             "num_pairs": "i32", "I": "i32", "limit": "fp32", "stride_g": "i32",
                             "stride_u": "i32", "stride_c": "i32", "stride_s": "i32"},
               "constexprs": {"ACT": 1, "BP": 16, "BN": 128, "FAKE": fake, "HAS_RW": rw},
               "num_warps": 4, "num_stages": 1, "no_spill": True}
              for fake, rw in ((False, True), (True, True), (True, False))]
    results = sm90_compile(cases + [convert] + swiglu)
    for case in cases:
        r = results[case["id"]]
        assert r["shfl"] == 0, f"{case['id']}: {r['shfl']} shuffles (the layouts do not line up)"
        assert r["wgmma_count"] == case["wgmma_per_step"], (case["id"], r["wgmma_count"])


@pytest.mark.parametrize("act_dtype", [torch.bfloat16, torch.float32])
def test_swiglu_q8_matches_the_reference(act_dtype):
    """``moe_swiglu.swiglu_q8`` (interpreter) = the reference's SwiGLU with limit, the routing
    weight, the cast to the activation dtype and Q8_32: bit-identical in fp32; in bf16 the
    scale bytes are identical and ~3 % of the codes move by one e4m3 step (the interpreter's
    bf16 cast truncates instead of rounding: docs/kernels.md §3.2; the GPU checks the
    rounded path through ``moe_experts``' epilogue, which shares ``swiglu_h``)."""
    from deepinfer.kernels.reference import moe, quant
    from deepinfer.kernels.triton import moe_swiglu

    torch.manual_seed(4)
    pairs, inter, limit = 37, 256, 7.0
    g = (torch.randn(pairs, inter) * 4).to(act_dtype)
    u = (torch.randn(pairs, inter) * 4).to(act_dtype)
    rw = torch.rand(pairs)
    codes, scales = moe_swiglu.swiglu_q8(g, u, rw, limit, act_dtype)
    h = (rw[:, None] * moe.swiglu_limit(g, u, limit)).to(act_dtype)
    ref_codes, ref_scales = quant.quant_fp8_ue8m0(h.float(), 32)
    assert torch.equal(scales, ref_scales)
    if act_dtype == torch.float32:
        assert torch.equal(codes, ref_codes.view(torch.uint8))
        return
    got = quant.dequant_fp8_ue8m0(codes.view(torch.float8_e4m3fn), scales)
    want = quant.dequant_fp8_ue8m0(ref_codes, ref_scales)
    assert (codes != ref_codes.view(torch.uint8)).float().mean() < 0.05
    assert ((got - want).abs() <= want.abs() / 8 + 1e-30).all()  # at most one e4m3 step
    assert ((got - want).norm() / want.norm()).item() < 3e-2


@pytest.mark.parametrize("act_dtype", [torch.float32, torch.bfloat16])
def test_w4a8_order_weights_through_run_experts(act_dtype):
    """W4A8-order stacks (``mxfp4_to_w4a8_order``) through ``run_experts`` off the Gluon path
    (here: the interpreter) take the folded Triton tiles that read the order: bit-identical to
    checkpoint-order weights on the same tiling, and (fp32 x) the reference within 1e-5."""
    from deepinfer.kernels.quantized import Mxfp4ExpertWeights
    from deepinfer.kernels.reference import moe
    from deepinfer.kernels.triton import moe_experts

    torch.manual_seed(5)
    experts, dim, inter, tokens, topk = 4, 256, 128, 5, 2

    def stack(o, i):
        return moe_experts.ExpertWeights(
            torch.randint(0, 256, (experts, o, i // 2), dtype=torch.uint8).view(torch.int8),
            torch.randint(119, 124, (experts, o, i // 32), dtype=torch.uint8), "mxfp4")

    ws = [stack(inter, dim), stack(inter, dim), stack(dim, inter)]
    x = (torch.randn(tokens, dim) * 0.5).to(act_dtype)
    ids = torch.stack([torch.randperm(experts)[:topk] for _ in range(tokens)])
    rw = torch.rand(tokens, topk)
    folded = {"SPLIT_K": False, "BK": 128, "DOWN": {"BK": 128}}
    want = moe_experts.run_experts(x, ids, rw, *ws, 7.0, config=folded)
    ordered = [moe_experts.mxfp4_to_w4a8_order(w) for w in ws]
    assert all(w.w4a8_order for w in ordered)
    got = moe_experts.run_experts(x, ids, rw, *ordered, 7.0)
    assert torch.equal(got, want)
    if act_dtype == torch.float32:
        ref = moe.moe_routed_experts(x, ids, rw,
                                     *[Mxfp4ExpertWeights(w.data, w.scale) for w in ws], 7.0)
        assert ((got - ref).norm() / ref.norm()).item() < 1e-5
    with pytest.raises(ValueError, match="W4A8-order"):
        moe_experts.run_experts(x, ids, rw, ordered[0], ws[1], ws[2], 7.0)
