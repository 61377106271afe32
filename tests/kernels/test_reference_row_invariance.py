"""The reference backend computes each row's bits independently of how many rows share the call.

The exact incremental-vs-one-shot tests (tests/runtime/test_model_incremental.py) rest on this.
Reductions accumulate in fp64; elementwise transcendentals (sigmoid, softmax, softplus, SiLU)
are evaluated in fp64 and rounded once, because PyTorch's vectorized fp32 versions differ from
its scalar tail loops in the last bit (measured: fp32 sigmoid on an AVX-512 CPU), which made a
row's result depend on its position in the batch.
"""

import pytest
import torch

from deepinfer.kernels.reference import compressor, engram, mhc, moe

N_ROWS = 21
# sub-batches whose rows fall in the whole call's vector body, its tail, or both
SUBS = [slice(12, 21), slice(0, 9), slice(3, 17), slice(16, 21)]


def randn(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def hc(x):
    s, d = 4, x.shape[-1] // 4
    fn, scale = randn(6 * s, s * d, seed=1, scale=0.1), torch.tensor([1.0, 1.0, 1.0])
    return mhc.hc_coeffs(x.view(-1, s, d).to(torch.bfloat16), fn, scale,
                         randn(6 * s, seed=2), 1e-6, 1e-6, 20)


def route(x):
    return moe.route_sqrtsoftplus(x.to(torch.bfloat16), randn(40, x.shape[-1], seed=3),
                                  randn(40, seed=4, scale=0.1), None, None, 6, 1.5)


def pool(x):
    g = x.view(-1, 4, x.shape[-1] // 4)
    return compressor.compress_pool(g, 3 * g.flip(-1))


def swiglu(x):
    return moe.swiglu_limit(4 * x, x.flip(-1), 7.0)


def inject(x):
    s, d = 4, x.shape[-1] // 4
    streams = x.view(-1, s, d)
    return engram.engram_inject(streams.to(torch.bfloat16), 2 * streams.flip(-1),
                                streams[:, 0], randn(s, d, seed=5), 1e-6, None)


@pytest.mark.parametrize("op", [hc, route, pool, swiglu, inject])
def test_rows_do_not_depend_on_batch(op):
    x = randn(N_ROWS, 256, seed=0, scale=3.0)
    full = op(x)
    full = full if isinstance(full, tuple) else (full,)
    for rows in SUBS:
        part = op(x[rows].clone())
        part = part if isinstance(part, tuple) else (part,)
        for i, (whole, sub) in enumerate(zip(full, part, strict=True)):
            assert torch.equal(whole[rows], sub), f"output {i}, rows {rows}"
