"""The decode projection kernel with the weight on the MMA's M side
(kernels/triton/linear_decode.py) under the interpreter, against the reference linear on the
dequantized FP8 weight (bf16 x) and on FP8 / bf16 weights with fp32 x (the logit head's form,
token tiles, split-K), and its SM90 compile gate (wgmma with the decoded weight as the register
A operand, no spills, every row class).

Under the interpreter the dots run in fp32 on exact products; the one rounding is the bf16
store, which the interpreter truncates (docs/kernels.md §3.2): up to 2^-8 per element, so rel.
L2 < 6e-3 against the fp64 reference, and 1e-3 against ``linear._linear_kernel`` (same products,
same store).
"""

import re

import pytest
import torch

pytest.importorskip("triton")

from deepinfer.kernels.reference import linear as ref_linear  # noqa: E402
from deepinfer.kernels.triton import linear, linear_decode  # noqa: E402
from tests.kernels.test_quantized import WEIGHT_RANGE, random_fp8_weight  # noqa: E402


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("rows,groups,split_k,config", [
    (1, 1, None, None),
    (5, 1, 3, None),  # split-K partials summed in split order
    (70, 3, None, None),  # grouped (wo_a's form)
    (256, 1, 2, {"BK": 64}),  # K = 160: the last K step masked
    (300, 1, None, None),  # beyond the decode sizes: token tiles (a prefill-size variant)
])
def test_matches_the_reference(rows, groups, split_k, config):
    g = torch.Generator().manual_seed(rows)
    out_features, k = 80, 160  # 80 rows: the last weight tile is clamped
    x = torch.randn(rows, groups, k, generator=g).to(torch.bfloat16)
    w = random_fp8_weight(groups * out_features, k, rows, WEIGHT_RANGE)
    out = linear_decode.linear_decode(x, w, out_features, split_k=split_k, config=config)
    assert out.shape == (rows, groups, out_features) and out.dtype == torch.bfloat16
    if groups == 1:
        ref = ref_linear.linear(x[:, 0], w)[:, None]
    else:
        ref = ref_linear.grouped_linear(x, w)
    assert _rel(out, ref) < 6e-3
    same_products = linear._launch(x, w, out_features)  # the row-major tiles
    assert _rel(out, same_products) < 1e-3


def test_supports_only_decode_sizes_of_its_forms():
    w = random_fp8_weight(64, 64, 0)
    x = torch.zeros(linear_decode.MAX_ROWS + 1, 1, 64, dtype=torch.bfloat16)
    assert linear_decode.accepts(x[:3], w) and linear_decode.accepts(x[:-1], w)
    assert not linear_decode.supports(x[:3], w)  # on the CPU
    assert not linear_decode.accepts(x, w)  # too many rows
    assert not linear_decode.accepts(x[:0], w)  # none
    assert not linear_decode.accepts(x[:3], torch.zeros(64, 64))  # a plain weight
    assert not linear_decode.accepts(x[:3].float(), w)  # fp32 x: linear._linear_kernel's


def test_decode_config_covers_every_row_count():
    seen = set()
    for rows in range(1, linear_decode.MAX_ROWS + 1):
        cfg = linear_decode.decode_config(rows)  # token tiles of <= 128 rows
        assert cfg["BT"] in (16, 32, 64, 128) and cfg["BT"] >= min(rows, 128)
        assert cfg["BO"] == 64 * (cfg["num_warps"] // 4)  # 64 weight rows per warpgroup
        assert cfg["BK"] % 32 == 0  # whole scale columns per step
        seen.add(cfg["BT"])
    assert seen == {16, 32, 64, 128}


def test_sm90_compile(sm90_compile):
    cases = linear_decode.aot_cases()
    results = sm90_compile(cases)
    for case in cases:
        assert results[case["id"]]["wgmma"], case["id"]


def test_the_decoded_weight_is_the_register_operand():
    """The point of the kernel: the wgmma's A operand is registers ({...}), B a shared-memory
    descriptor, and no st.shared of decoded weights before the last wgmma (compiled for sm_90
    on the CPU)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import re, triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from deepinfer.kernels.triton import linear_decode as ld
        case = [c for c in ld.aot_cases() if c["id"] == "linear_decode_rows64_split2"][0]
        sig = dict(case["signature"])
        attrs = {(i,): [["tt.divisibility", 16]] for i, (n, t) in enumerate(sig.items())
                 if t.startswith("*") or n.startswith("stride") or n in case["divisible"]}
        sig.update({n: "constexpr" for n in case["constexprs"]})
        c = triton.compile(ASTSource(getattr(ld, case["kernel"]), sig,
                                     constexprs=case["constexprs"], attrs=attrs),
                           target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": case["num_warps"],
                                    "num_stages": case["num_stages"]})
        print("@@" + "\\n".join(l for l in c.asm["ptx"].splitlines()
                                if "wgmma.mma_async" in l or "st.shared" in l))
    """)
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.split("@@", 1)[1].splitlines()
    mma = [line for line in lines if "wgmma.mma_async" in line]
    last_mma = max(i for i, line in enumerate(lines) if "wgmma.mma_async" in line)
    # shared-memory stores only in the epilogue (the split-K partials' layout change)
    assert mma and not any("st.shared" in line for line in lines[:last_mma])
    for line in mma:  # d regs, then A: "{%r..}" registers (a descriptor would be "%rd..")
        operands = re.sub(r"^\s*wgmma\.mma_async\S*\s*", "", line)
        after_d = operands.split("}", 1)[1]
        assert after_d.lstrip(", ").startswith("{"), line
