"""Triton compressor pooling (kernels/triton/compressor.py) against the reference.

fp32 softmax + weighted sum over R <= 3 tokens against an fp32-softmax/fp64-sum reference:
atol/rtol 1e-6 (a few fp32 ulps). The chunked variant is checked for every partial-state length
P < ratio, so groups straddling the carried state and the chunk are covered.
"""

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from deepinfer.kernels.reference import compressor as ref  # noqa: E402
from deepinfer.kernels.reference import compressor_fused as ref_fused  # noqa: E402
from deepinfer.kernels.triton import compressor as tri  # noqa: E402


@pytest.mark.parametrize("ratio", [1, 2, 3])
def test_compress_pool_matches_reference(ratio):
    gen = torch.Generator().manual_seed(11)
    kv = torch.randn(5, ratio, 96, generator=gen)
    gate = torch.randn(5, ratio, 96, generator=gen) * 3
    torch.testing.assert_close(tri.compress_pool(kv, gate), ref.compress_pool(kv, gate),
                               atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("ratio", [1, 2])
def test_compress_pool_chunk_carries_partial_state(ratio):
    gen = torch.Generator().manual_seed(12)
    for partial in range(ratio):
        for chunk in (1, 7):
            pk, pg = torch.randn(partial, 64, generator=gen), torch.randn(partial, 64,
                                                                           generator=gen)
            kv, gate = torch.randn(chunk, 64, generator=gen), torch.randn(chunk, 64,
                                                                           generator=gen)
            got = tri.compress_pool_chunk(pk, pg, kv, gate, ratio)
            want = ref_fused.compress_pool_chunk(pk, pg, kv, gate, ratio)
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_compressor_sm90_compiles():
    sys.path.insert(0, str(Path(__file__).parent))
    from aot_attention_side import SM90_SHARED_LIMIT, compile_cases

    for r in compile_cases("compressor"):
        print(r)
        assert r["shared"] < SM90_SHARED_LIMIT, r
