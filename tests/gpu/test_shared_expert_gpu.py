"""The shared expert on the dense projection kernels (kernels/triton/shared_expert.py) on the
GPU, at the V4.1 shapes (D = 5120, I = 2304, FP8 block weights), 64, 256 and 4096 rows, against
``reference.moe.expert_ffn`` and the grouped 1-expert path (both timed).

    TRITON_INTERPRET=0 python -m pytest -q -m gpu -s tests/gpu/test_shared_expert_gpu.py

Tolerance 1e-2 (rel. L2, bf16 output): the same exact products with fp32 sums in another
order; a bf16 rounding of g / u / y can move by one ulp and a Q8_32 code of h by one step.
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu.test_gemm_side_gpu import _rel, _row, nan_poisoned_allocations

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _gpu_only():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an SM90 GPU")


@pytest.mark.parametrize("rows", [64, 256, 4096])
def test_shared_expert_dense_path(rows):
    """4096 rows: a prefill chunk (the dense path there too since round 48a) against the grouped
    kernel, both timed (do_bench: host-bound at 64 / 256 rows; the decode step's graph replay
    is the measure there)."""
    from deepinfer.kernels.quantized import Fp8BlockWeight
    from deepinfer.kernels.reference import moe
    from deepinfer.kernels.triton import moe_experts, shared_expert
    from tests.gpu.test_gemm_side_gpu import _ms

    torch.manual_seed(rows)
    dim, inter = 5120, 2304

    def weight(o, i):
        codes = torch.randint(0, 255, (o, i), dtype=torch.uint8, device="cuda")
        codes = torch.where((codes & 0x7F) == 0x7F, codes - 1, codes)
        scale = torch.randint(112, 122, (o // 32, i // 32), dtype=torch.uint8, device="cuda")
        return Fp8BlockWeight(codes.view(torch.float8_e4m3fn), scale.view(torch.float8_e8m0fnu))

    w1, w3, w2 = weight(inter, dim), weight(inter, dim), weight(dim, inter)
    x = (torch.randn(rows, dim, device="cuda") * 0.5).to(torch.bfloat16)
    assert shared_expert.applies(x, w1, w3, w2)
    with nan_poisoned_allocations():
        out = moe_experts.expert_ffn(x, w1, w3, w2, 10.0)  # dispatches to shared_expert
    ref = moe.expert_ffn(x, w1, w3, w2, 10.0)
    # no routing weight (the SwiGLU's weight-free form) against explicit weights of 1: the same
    # bits
    ones_out = shared_expert.shared_expert_ffn(x, w1, w3, w2, 10.0,
                                               torch.ones(rows, device="cuda"))
    assert torch.equal(out, ones_out)
    flops = 6.0 * rows * dim * inter
    _row(f"shared expert dense {rows}", f"{rows}x{dim}", _rel(out, ref), 1e-2,
         _ms(lambda: moe_experts.expert_ffn(x, w1, w3, w2, 10.0)), flops)
    one = [moe_experts.fp8_block_experts(w.codes, w.scale) for w in (w1, w3, w2)]
    ids = torch.zeros((rows, 1), dtype=torch.int32, device="cuda")
    ones = torch.ones(rows, device="cuda")
    grouped = moe_experts.run_experts(x, ids, ones, *one, 10.0, combine=False)
    _row(f"shared expert grouped {rows}", f"{rows}x{dim}", _rel(grouped, ref), 1e-2,
         _ms(lambda: moe_experts.run_experts(x, ids, ones, *one, 10.0, combine=False)), flops)


@pytest.mark.parametrize("rows", [1024, 4096])
def test_shared_expert_packed_gate_up(rows, monkeypatch):
    """Gate and up weights in one tensor (``Expert.pack_gate_up``): from ``PACKED_MIN_ROWS``
    one GEMM of 4,608 outputs instead of two of 2,304 — the same bits (no split-K from
    gemm_fp8.INVARIANT_MIN_ROWS), both timed."""
    from deepinfer.kernels.quantized import Fp8BlockWeight, stacked_rows
    from deepinfer.kernels.triton import shared_expert
    from tests.gpu.test_gemm_side_gpu import _ms

    torch.manual_seed(rows + 1)
    dim, inter = 5120, 2304
    codes = torch.randint(0, 255, (2 * inter, dim), dtype=torch.uint8, device="cuda")
    codes = torch.where((codes & 0x7F) == 0x7F, codes - 1, codes).view(torch.float8_e4m3fn)
    scale = torch.randint(112, 122, (2 * inter // 32, dim // 32), dtype=torch.uint8,
                          device="cuda").view(torch.float8_e8m0fnu)
    w1 = Fp8BlockWeight(codes[:inter], scale[:inter // 32])
    w3 = Fp8BlockWeight(codes[inter:], scale[inter // 32:])
    apart = [Fp8BlockWeight(w.codes.clone(), w.scale.clone()) for w in (w1, w3)]
    c2 = torch.randint(0, 255, (dim, inter), dtype=torch.uint8, device="cuda")
    c2 = torch.where((c2 & 0x7F) == 0x7F, c2 - 1, c2).view(torch.float8_e4m3fn)
    w2 = Fp8BlockWeight(c2, torch.randint(112, 122, (dim // 32, inter // 32), dtype=torch.uint8,
                                          device="cuda").view(torch.float8_e8m0fnu))
    assert stacked_rows(w1, w3) is not None and stacked_rows(*apart) is None
    assert rows >= shared_expert.PACKED_MIN_ROWS
    x = (torch.randn(rows, dim, device="cuda") * 0.5).to(torch.bfloat16)
    with nan_poisoned_allocations():
        packed = shared_expert.shared_expert_ffn(x, w1, w3, w2, 10.0)
        separate = shared_expert.shared_expert_ffn(x, *apart, w2, 10.0)
    assert torch.equal(packed, separate), f"{rows} rows: packed gate/up changed the bits"
    flops = 6.0 * rows * dim * inter
    _row(f"shared expert packed {rows}", f"{rows}x{dim}", 0.0, 1e-2,
         _ms(lambda: shared_expert.shared_expert_ffn(x, w1, w3, w2, 10.0)), flops)
    _row(f"shared expert separate {rows}", f"{rows}x{dim}", 0.0, 1e-2,
         _ms(lambda: shared_expert.shared_expert_ffn(x, *apart, w2, 10.0)), flops)
