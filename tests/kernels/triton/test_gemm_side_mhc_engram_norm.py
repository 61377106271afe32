"""mHC coefficients/collapse/expand, engram injection, RMSNorm (kernels/triton/mhc.py, engram.py,
norm.py) and the backend registration.

Tolerances (fp32 kernels vs the fp64-summing references, D <= 128):
  * hc_coeffs: pre/post/comb abs 2e-6. Values are O(1); the fp32 dot over K = S*D and 20 Sinkhorn
    rounds of fp32 divisions accumulate a few ulp (measured ~1e-7).
  * hc_collapse / hc_expand / engram / rms_norm on fp32: rel 1e-6 (S or D fp32 terms);
    fp16 outputs: at most one fp16 rounding step apart (abs 2^-10 relative to |y|).
"""

import pytest
import torch

triton = pytest.importorskip("triton")

from deepinfer.kernels import registry  # noqa: E402
from deepinfer.kernels.reference import engram, mhc, norm  # noqa: E402
from deepinfer.kernels.triton import engram as tri_engram  # noqa: E402
from deepinfer.kernels.triton import mhc as tri_mhc  # noqa: E402
from deepinfer.kernels.triton import norm as tri_norm  # noqa: E402


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("block_m", [16, 64])  # the interpreter's block, the GPU's prefill block
@pytest.mark.parametrize("split", [None, 1, 3])  # default, fused epilogue, split-K + finalize
def test_hc_coeffs(split, block_m, monkeypatch):
    config = tri_mhc.coeffs_config
    monkeypatch.setattr(tri_mhc, "coeffs_config",
                        lambda n, interpret=False: {**config(n, interpret), "BM": block_m})
    g = torch.Generator().manual_seed(1)
    num_tokens, s, dim = 19, 4, 64
    x = torch.randn(num_tokens, s, dim, generator=g)
    fn = torch.randn((2 + s) * s, s * dim, generator=g) * 0.05
    scale = torch.tensor([0.5, 0.7, 1.3])
    base = torch.randn((2 + s) * s, generator=g) * 0.3
    out = tri_mhc.hc_coeffs(x, fn, scale, base, 1e-20, 1e-6, 20, split=split)
    ref = mhc.hc_coeffs(x, fn, scale, base, 1e-20, 1e-6, 20)
    for o, r, name in zip(out, ref, ("pre", "post", "comb"), strict=True):
        assert o.shape == r.shape and o.dtype == torch.float32, name
        assert (o - r).abs().max().item() < 2e-6, name


def test_hc_coeffs_config_by_token_count(monkeypatch):
    """Decode (<= COEFFS_DECODE_MAX_TOKENS) takes BM=16 + split-K; prefill takes the larger
    token block (a multiple of wgmma's 64 rows); the precision is read at call time."""
    k = 4 * 5120  # V4.1: S*D
    limit = tri_mhc.COEFFS_DECODE_MAX_TOKENS
    assert limit == 128 and tri_mhc.COEFFS_PRECISION == "bf16x3" and tri_mhc.COEFFS_FN_PARTS == 3
    for n in (1, 64, limit):
        cfg = tri_mhc.coeffs_config(n)
        assert (cfg["BM"], cfg["num_warps"]) == (tri_mhc.COEFFS_BLOCK_M, tri_mhc.COEFFS_NUM_WARPS)
        assert cfg["BM"] == 16 and cfg["precision"] == tri_mhc.COEFFS_PRECISION_DECODE == "tf32x3"
    for n in (limit + 1, 4096, 65536):
        cfg = tri_mhc.coeffs_config(n)
        assert (cfg["BM"], cfg["num_warps"]) == (tri_mhc.COEFFS_BLOCK_M_PREFILL,
                                                 tri_mhc.COEFFS_NUM_WARPS_PREFILL)
        assert cfg["BM"] >= 64 and cfg["BM"] % 64 == 0 and cfg["precision"] == "bf16x3"
    # the finalize keeps small token blocks at every count (its programs are serial loops)
    for n in (1, 64, limit, limit + 1, 4096):
        assert tri_mhc.coeffs_config(n)["finalize_BM"] == tri_mhc.COEFFS_FINALIZE_BLOCK_M == 16
    # split-K still fills the GPU at decode; 4K prefill: 64 blocks x 8 splits = 512 programs
    assert tri_mhc.coeffs_split(64, k, tri_mhc.coeffs_config(64)) == 32
    assert tri_mhc.coeffs_split(4096, k, tri_mhc.coeffs_config(4096)) == 8
    # batch invariance: one split from INVARIANT_MIN_ROWS tokens on (by size it would halve
    # per doubling: 8,192 tokens 4, 16,384 2), by size below
    fixed = tri_mhc.COEFFS_INVARIANT_SPLIT
    assert fixed > 1
    for n in (tri_mhc.INVARIANT_MIN_ROWS, 4096, 8192, 16384, 65536):
        assert tri_mhc.coeffs_split(n, k, tri_mhc.coeffs_config(n)) == fixed, n
    assert tri_mhc.coeffs_split(512, k, tri_mhc.coeffs_config(512)) == 32
    monkeypatch.setattr(tri_mhc, "COEFFS_INVARIANT_SPLIT", 0)  # off: by size again
    assert tri_mhc.coeffs_split(8192, k, tri_mhc.coeffs_config(8192)) == 4
    interp = tri_mhc.coeffs_config(4096, interpret=True)
    assert interp["precision"] == "ieee" and interp["BM"] == 16  # fp32 only in the interpreter
    monkeypatch.setattr(tri_mhc, "COEFFS_PRECISION", "tf32x3")  # the A/B switch of the bench
    assert tri_mhc.coeffs_config(4096)["precision"] == "tf32x3"


def test_split_bf16_parts():
    """The torch twin of the kernel's fn split: 3 bf16 parts sum to fn exactly (fp64 sum) over
    2^-110..2^126 and both signs; 2 parts within 2^-16 relative, 1 part within 2^-8."""
    g = torch.Generator().manual_seed(6)
    mantissa = 1 + torch.rand(200_000, generator=g, dtype=torch.float64)
    exponent = torch.randint(-110, 127, (200_000,), generator=g).double()
    sign = torch.where(torch.rand(200_000, generator=g) < 0.5, -1.0, 1.0).double()
    fn = (sign * mantissa * torch.exp2(exponent)).float()
    fn = torch.cat([fn, torch.randn(4096, generator=g) * 0.01,  # V4.1-like weights
                    torch.tensor([0.0, -0.0, 1.0, -3.0e38, 1 + 2.0**-23, 2.0**-110])])
    fn = fn[torch.isfinite(fn)]
    for parts, bound in ((3, 2.0**-24), (2, 2.0**-16), (1, 2.0**-8)):
        split = tri_mhc.split_bf16_parts(fn, parts)
        assert len(split) == parts and all(p.dtype == torch.bfloat16 for p in split)
        total = sum(p.double() for p in split)
        rel = ((total - fn.double()).abs() / fn.double().abs().clamp_min(1e-300)).max().item()
        assert rel <= bound, (parts, rel)
    assert rel > 2.0**-10  # one part is not exact: the bound checks something
    hi, mid, lo = tri_mhc.split_bf16_parts(fn, 3)
    assert torch.equal(hi.double() + mid.double() + lo.double(), fn.double())
    assert (lo.double().abs() <= fn.double().abs() * 2.0**-16).all()  # each part 8 bits lower


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_hc_collapse_expand(dtype):
    g = torch.Generator().manual_seed(2)
    num_tokens, s, dim = 5, 4, 96
    x = torch.randn(num_tokens, s, dim, generator=g).to(dtype)
    pre, post = torch.rand(num_tokens, s, generator=g), torch.rand(num_tokens, s, generator=g) * 2
    comb = torch.rand(num_tokens, s, s, generator=g)
    out = torch.randn(num_tokens, dim, generator=g).to(dtype)
    tol = 1e-6 if dtype == torch.float32 else 1e-3
    collapsed = tri_mhc.hc_collapse(x, pre)
    assert collapsed.dtype == dtype and _rel(collapsed, mhc.hc_collapse(x, pre)) < tol
    expanded = tri_mhc.hc_expand(out, x, post, comb)
    assert expanded.dtype == dtype and _rel(expanded, mhc.hc_expand(out, x, post, comb)) < tol


@pytest.mark.parametrize("with_mask", [False, True])
def test_engram_inject(with_mask):
    g = torch.Generator().manual_seed(3)
    num_tokens, s, dim = 6, 4, 96
    x = torch.randn(num_tokens, s, dim, generator=g)
    key = torch.randn(num_tokens, s, dim, generator=g)
    value = torch.randn(num_tokens, dim, generator=g)
    wqk = torch.randn(s, dim, generator=g)
    mask = (torch.rand(num_tokens, generator=g) > 0.4) if with_mask else None
    out = tri_engram.engram_inject(x, key, value, wqk, 1e-20, mask)
    assert _rel(out, engram.engram_inject(x, key, value, wqk, 1e-20, mask)) < 1e-6


def test_engram_inject_bf16_key_value_is_their_fp32_copy():
    """The model hands the engram projection's bf16 output over as it is: the bits of its
    fp32 copy (an exact upcast in the kernel's loads and in the reference's arithmetic)."""
    g = torch.Generator().manual_seed(7)
    num_tokens, s, dim = 5, 4, 96
    x = torch.randn(num_tokens, s, dim, generator=g)
    kv = torch.randn(num_tokens, (s + 1) * dim, generator=g).to(torch.bfloat16)
    key, value = kv[:, : s * dim].view(num_tokens, s, dim), kv[:, s * dim:]
    wqk = torch.randn(s, dim, generator=g)
    for fn in (tri_engram.engram_inject, engram.engram_inject):
        assert torch.equal(fn(x, key, value, wqk, 1e-20, None),
                           fn(x, key.float(), value.float(), wqk, 1e-20, None))


@pytest.mark.parametrize("dtype,dim", [(torch.float32, 96), (torch.float16, 2048 + 64)])
def test_rms_norm(dtype, dim):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 2, dim, generator=g).to(dtype)
    weight = torch.randn(dim, generator=g)
    out = tri_norm.rms_norm(x, weight, 1e-20)
    ref = norm.rms_norm(x, weight, 1e-20)
    assert out.dtype == dtype and out.shape == ref.shape
    assert _rel(out, ref) < (1e-6 if dtype == torch.float32 else 1e-3)


@pytest.mark.parametrize("dtype,dim", [(torch.float32, 96), (torch.float16, 2048 + 64)])
def test_rms_norm_q8(dtype, dim):
    """The normed rows (rms_norm's bits) and their Q8_32 values (the quantizer kernel's bits
    of those rows) in one pass."""
    from deepinfer.kernels.triton import quant_act

    g = torch.Generator().manual_seed(6)
    x = torch.randn(3, 2, dim, generator=g).to(dtype)
    weight = torch.randn(dim, generator=g)
    h, hq = tri_norm.rms_norm_q8(x, weight, 1e-20)
    assert torch.equal(h, tri_norm.rms_norm(x, weight, 1e-20)) and hq.shape == x.shape
    assert torch.equal(hq, quant_act.fake_quant_fp8_block32(h))
    rh, rq = norm.rms_norm_q8(x, weight, 1e-20)
    assert torch.equal(rh, norm.rms_norm(x, weight, 1e-20))
    assert _rel(h, rh) < (1e-6 if dtype == torch.float32 else 1e-3)
    with pytest.raises(AssertionError, match="multiple of 32"):
        tri_norm.rms_norm_q8(x[..., :40], weight[:40], 1e-20)


def test_register_triton_backend(monkeypatch):
    from deepinfer.kernels.triton import HAS_TRITON, register_triton_backend

    assert HAS_TRITON
    registry.ops()  # load the reference backend, then register into a copy (no leak elsewhere)
    monkeypatch.setattr(registry, "_REGISTRY",
                        {op: dict(regs) for op, regs in registry._REGISTRY.items()})
    names = register_triton_backend()
    mine = {"fake_quant_fp8_block32", "linear_quant_act", "route_sqrtsoftplus",
            "moe_routed_experts", "expert_ffn", "hc_coeffs", "hc_collapse", "hc_expand",
            "engram_inject", "rms_norm"}
    assert mine <= set(names)
    h200 = {"device": "cuda", "capability": (9, 0)}
    for op in mine:
        assert registry.available_backends(op)[0] == "triton"
        assert registry.choose_backend(op, h200) == "triton"
        assert registry.choose_backend(op, {"device": "cpu"}) == "reference"
    assert registry.choose_backend("linear_quant_act", {**h200, "in_features": 48}) == "reference"


def test_engram_hash_ids_matches_runtime():
    from deepinfer.runtime.model import engram_hash

    g = torch.Generator().manual_seed(5)
    for layers, order, heads, vocab, compressed, pad in (((1, 14), 4, 8, 16_000_000, 99092, 5),
                                                         ((3,), 3, 3, 1000, 50, 2)):
        constants = engram_hash.make_engram_hash_constants(layers, order, heads, vocab,
                                                           compressed, pad)
        ctx = torch.randint(-1, compressed, (3, order - 1 + 13), generator=g)
        ctx[0, : order - 1] = -1  # sequence start
        out = tri_engram.engram_hash_windows(ctx.unfold(1, order, 1), constants)  # a view
        assert torch.equal(out, engram_hash.engram_hash_ids(ctx, constants))  # bitwise


def test_engram_hash_windows_matches_reference():
    """The registered op the model calls (prefill: windows gathered from the flat histories
    and chunks; decode: history rows + the new id), against the reference: leading dims,
    strided windows, blocked ids anywhere in a window, empty input."""
    from deepinfer.kernels.reference import engram as ref_engram
    from deepinfer.runtime.model import engram_hash

    g = torch.Generator().manual_seed(6)
    constants = engram_hash.make_engram_hash_constants((1, 14), 4, 8, 16_000_000, 99092, 5)
    windows = torch.randint(-1, 99092, (2, 37, 4), generator=g)
    windows[0, :5, :2] = -1
    windows[1, 3, 2] = -1  # blocked in the middle: it and everything older read pad_id
    got = tri_engram.engram_hash_windows(windows, constants)
    assert got.shape == (2, 37, 2, 24)
    assert torch.equal(got, ref_engram.engram_hash_windows(windows, constants))
    strided = windows.transpose(0, 1)  # (37, 2, 4), not contiguous
    assert torch.equal(tri_engram.engram_hash_windows(strided, constants),
                       ref_engram.engram_hash_windows(strided, constants))
    assert tri_engram.engram_hash_windows(windows[:, :0], constants).shape == (2, 0, 2, 24)


# --- SM90 compile gate -----------------------------------------------------------------------

V41_HIDDEN, V41_HC = 5120, 4


HC_COEFFS_SIGNATURE = {"x_ptr": "*bf16", "fn_ptr": "*fp32", "scale_ptr": "*fp32",
                       "base_ptr": "*fp32", "pre_ptr": "*fp32", "post_ptr": "*fp32",
                       "comb_ptr": "*fp32", "ws_ptr": "*fp32", "N": "i32", "K": "i32",
                       "k_per_split": "i32", "stride_xn": "i32", "stride_xs": "i32",
                       "D": "i32", "stride_fn": "i32",
                       "norm_eps": "fp32", "hc_eps": "fp32"}


V41_HC_COLS = 2 * V41_HC * V41_HC  # the coefficients kernel's fused fn tile: comb, pre, post, pad


def _hc_coeffs_case(num_tokens: int, precision: str, split: int | None = None,
                    strided: bool = False) -> dict:
    """``_hc_coeffs_kernel`` as ``hc_coeffs`` launches it for ``num_tokens`` bf16 tokens at V4.1
    (decode: the decode BM + split-K; prefill: the prefill BM, split-K, or split 1 = fused
    epilogue; ``strided``: the first block's stride-0 streams)."""
    cfg = tri_mhc.coeffs_config(num_tokens)
    if split is None:
        split = tri_mhc.coeffs_split(num_tokens, V41_HC * V41_HIDDEN, cfg)
    return {"id": f"hc_coeffs_s4_d5120_n{num_tokens}_bm{cfg['BM']}_{precision}_split{split}"
                  + ("_strided" if strided else ""),
            "module": "deepinfer.kernels.triton.mhc", "kernel": "_hc_coeffs_kernel",
            "signature": HC_COEFFS_SIGNATURE,
            "constexprs": {"S": V41_HC, "C": V41_HC_COLS, "SINKHORN_ITERS": 20, "SPLIT": split,
                           "PRECISION": precision, "FN_PARTS": cfg["fn_parts"], "BM": cfg["BM"],
                           "BK": cfg["BK"], "STRIDED": strided},
            "num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"], "no_spill": True,
            # one warpgroup's wgmma needs M >= 64 tokens; BM 16 or 32 runs mma.sync
            "expect_wgmma": cfg["BM"] >= 64, "divisible": ["K", "k_per_split", "D", "stride_xs"]}


def test_sm90_compile(sm90_compile):
    decode, prefill = 64, 4096  # both precisions at both token blocks (decode and prefill BM)
    pcfg = tri_mhc.coeffs_config(prefill)
    cases = [
        _hc_coeffs_case(decode, "bf16x3"),
        _hc_coeffs_case(decode, "bf16x3", split=1),
        _hc_coeffs_case(decode, "tf32x3"),  # the previous route, still selectable
        _hc_coeffs_case(prefill, "bf16x3"),
        _hc_coeffs_case(prefill, "bf16x3", split=1),  # fused epilogue at the prefill BM
        _hc_coeffs_case(prefill, "tf32x3"),
        _hc_coeffs_case(decode, "tf32x3", strided=True),  # the first block's streams (decode
        # default: tf32x3)
        _hc_coeffs_case(prefill, "bf16x3", strided=True),
        {"id": "hc_finalize_s4_split16", "module": "deepinfer.kernels.triton.mhc",
         "kernel": "_hc_finalize_kernel",
         "signature": {"ws_ptr": "*fp32", "scale_ptr": "*fp32", "base_ptr": "*fp32",
                       "pre_ptr": "*fp32", "post_ptr": "*fp32", "comb_ptr": "*fp32", "N": "i32",
                       "K": "i32", "norm_eps": "fp32", "hc_eps": "fp32"},
         "constexprs": {"S": V41_HC, "C": V41_HC_COLS, "SINKHORN_ITERS": 20, "SPLIT": 16,
                        "BM": 16},
         "num_warps": 4, "num_stages": 1},
        {"id": "hc_finalize_s4_prefill", "module": "deepinfer.kernels.triton.mhc",
         "kernel": "_hc_finalize_kernel",
         "signature": {"ws_ptr": "*fp32", "scale_ptr": "*fp32", "base_ptr": "*fp32",
                       "pre_ptr": "*fp32", "post_ptr": "*fp32", "comb_ptr": "*fp32", "N": "i32",
                       "K": "i32", "norm_eps": "fp32", "hc_eps": "fp32"},
         "constexprs": {"S": V41_HC, "C": V41_HC_COLS, "SINKHORN_ITERS": 20,
                        "SPLIT": tri_mhc.coeffs_split(prefill, V41_HC * V41_HIDDEN, pcfg),
                        "BM": pcfg["finalize_BM"]},
         "num_warps": 4, "num_stages": 1},
        {"id": "hc_expand_s4", "module": "deepinfer.kernels.triton.mhc",
         "kernel": "_hc_expand_kernel",
         "signature": {"out_ptr": "*bf16", "x_ptr": "*bf16", "post_ptr": "*fp32",
                       "comb_ptr": "*fp32", "y_ptr": "*bf16", "D": "i32", "stride_on": "i32",
                       "stride_xn": "i32", "stride_xs": "i32"},
         "constexprs": {"S": V41_HC, "BLOCK_D": 512}, "num_warps": 4, "num_stages": 1},
        {"id": "hc_collapse_s4", "module": "deepinfer.kernels.triton.mhc",
         "kernel": "_hc_collapse_kernel",
         "signature": {"x_ptr": "*bf16", "pre_ptr": "*fp32", "out_ptr": "*bf16", "D": "i32",
                       "stride_xn": "i32", "stride_xs": "i32", "stride_on": "i32"},
         "constexprs": {"S": V41_HC, "BLOCK_D": 1024}, "num_warps": 4, "num_stages": 1},
        *({"id": f"engram_inject_s4_{kv[1:]}", "module": "deepinfer.kernels.triton.engram",
           "kernel": "_engram_inject_kernel",
           "signature": {"x_ptr": "*bf16", "key_ptr": kv, "value_ptr": kv,
                         "wqk_ptr": "*fp32", "mask_ptr": "*i8", "y_ptr": "*bf16", "D": "i32",
                         "stride_xn": "i32", "stride_xs": "i32", "stride_kn": "i32",
                         "stride_ks": "i32", "stride_vn": "i32", "stride_ws": "i32",
                         "eps": "fp32"},
           "constexprs": {"HAS_MASK": True, "S": V41_HC, "BLOCK_D": 512}, "num_warps": 4,
           "num_stages": 1} for kv in ("*fp32", "*bf16")),
        {"id": "engram_hash_l2_m4_h8", "module": "deepinfer.kernels.triton.engram",
         "kernel": "_engram_hash_kernel",
         "signature": {"win_ptr": "*i64", "mult_ptr": "*i64", "prime_ptr": "*i64",
                       "offset_ptr": "*i64", "out_ptr": "*i64", "num_rows": "i32",
                       "stride_wr": "i32", "stride_wm": "i32", "pad_id": "i64"},
         "constexprs": {"L": 2, "M": 4, "H": 8, "HP": 8, "BP": 64}, "num_warps": 4,
         "num_stages": 1},
    ] + [
        {"id": f"rms_norm_2048{'_q8' if quant else ''}", "module": "deepinfer.kernels.triton.norm",
         "kernel": "_rms_norm_kernel",
         "signature": {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "q_ptr": "*bf16",
                       "D": "i32", "stride_x": "i32", "stride_y": "i32", "stride_q": "i32",
                       "eps": "fp32"},
         "constexprs": {"BLOCK_D": 2048, "QUANT": quant}, "num_warps": 8, "num_stages": 1}
        for quant in (False, True)
    ]
    sm90_compile(cases)


class _LaunchSpy:
    """Stands in for a kernel: records each launch's keyword arguments, then launches."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append(kwargs)
            return self.kernel[grid](*args, **kwargs)
        return launch


# (D, split): each split within one stream (read strided), and splits across streams or K
# steps of 48 columns (D not a multiple of the split's K range: one contiguous copy first)
@pytest.mark.parametrize("dim,split,strided", [(64, 4, True), (64, 8, True), (96, 4, True),
                                               (64, 3, False), (48, 4, False), (64, 1, False)])
@pytest.mark.parametrize("streams", ["stride0", "distinct"])
def test_hc_coeffs_reads_stride0_streams_as_the_copy(dim, split, strided, streams,
                                                     monkeypatch):
    """The first block's streams, every one the embedding, as a stride-0 view (no copy), and
    distinct streams 2D apart (each split must read its own stream): the same bits as on the
    contiguous copy."""
    g = torch.Generator().manual_seed(5)
    num_tokens, s = 7, 4
    if streams == "stride0":
        view = torch.randn(num_tokens, dim, generator=g).unsqueeze(1).expand(-1, s, -1)
        assert view.stride(1) == 0
    else:
        view = torch.randn(num_tokens, s, 2 * dim, generator=g)[:, :, :dim]
        assert view.stride(1) == 2 * dim
    fn = torch.randn((2 + s) * s, s * dim, generator=g) * 0.05
    scale = torch.tensor([0.5, 0.7, 1.3])
    base = torch.randn((2 + s) * s, generator=g) * 0.3
    spy = _LaunchSpy(tri_mhc._hc_coeffs_kernel)
    monkeypatch.setattr(tri_mhc, "_hc_coeffs_kernel", spy)
    got = tri_mhc.hc_coeffs(view, fn, scale, base, 1e-20, 1e-6, 20, split=split)
    want = tri_mhc.hc_coeffs(view.contiguous(), fn, scale, base, 1e-20, 1e-6, 20, split=split)
    assert [k["STRIDED"] for k in spy.launches] == [strided, False]
    for o, w in zip(got, want, strict=True):
        assert torch.equal(o, w)
    ref = mhc.hc_coeffs(view, fn, scale, base, 1e-20, 1e-6, 20)
    assert (got[2] - ref[2]).abs().max().item() < 2e-6
