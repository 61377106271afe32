"""Triton fused cache writes (kernels/triton/cache_write.py) against the composed references
(kernels/reference/attention_fused.py: rms_norm -> apply_rope -> formats.pack_*).

Tolerance: records are compared byte for byte. The quantizers are exact integer/bit operations
and the only transcendental inputs (rsqrt of the mean square, cos/sin of the RoPE angle) agree
with torch to an ulp, which moves a code only when a value sits within an ulp of a rounding
boundary after the cast to the row dtype. The tests allow no mismatching byte at these sizes;
the GPU test reports the mismatch fraction at real shapes (libdevice sin/cos vs torch's).
The e4m3/e2m1 encoders are also checked exhaustively on grid midpoints (ties).
"""

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from deepinfer.kernels.reference import attention_fused as ref  # noqa: E402
from deepinfer.kernels.reference import quant, rope  # noqa: E402
from deepinfer.kernels.triton import cache_write as tri  # noqa: E402

FREQ = rope.rope_inv_freq(32, 160000.0, rope.Yarn(16.0, 65536, 32.0, 1.0))


def _rows(n: int, d: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    mag = torch.exp(torch.randn(n, 1, generator=gen) * 2)  # rows spanning many binades
    return (torch.randn(n, d, generator=gen) * mag).to(dtype)


@pytest.mark.parametrize("dtype,d", [(torch.float32, 64), (torch.float16, 64),
                                     (torch.float32, 512)])
def test_window_kv_records(dtype, d):
    gen = torch.Generator().manual_seed(3)
    x = _rows(9, d, dtype, gen)
    w = torch.rand(d, generator=gen) + 0.5
    pos = torch.randint(0, 1 << 20, (9,), generator=gen)
    got = tri.window_kv_records(x, w, 1e-6, pos, FREQ)
    want = ref.window_kv_records(x, w, 1e-6, pos, FREQ)
    assert torch.equal(got, want)


def test_write_window_kv_ring_keeps_last_rows():
    gen = torch.Generator().manual_seed(4)
    x = _rows(11, 64, torch.float32, gen)
    w = torch.rand(64, generator=gen) + 0.5
    pos = torch.arange(37, 48)
    ring = torch.randint(0, 255, (4, 66), generator=gen, dtype=torch.uint8)
    want = ref.write_window_kv(x, w, 1e-20, pos, FREQ, ring.clone())
    got = tri.write_window_kv(x, w, 1e-20, pos, FREQ, ring)
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype,d", [(torch.float32, 64), (torch.float16, 64),
                                     (torch.float32, 512)])
def test_compressed_kv_records(dtype, d):
    gen = torch.Generator().manual_seed(5)
    x = _rows(9, d, dtype, gen)
    x[0, :16] = 0.0  # an all-zero block takes the amax floor
    pos = torch.randint(0, 1 << 20, (9,), generator=gen)
    assert torch.equal(tri.compressed_kv_records(x, pos, FREQ),
                       ref.compressed_kv_records(x, pos, FREQ))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_index_key_records(dtype):
    gen = torch.Generator().manual_seed(6)
    x = _rows(9, 128, dtype, gen)
    w = torch.rand(128, generator=gen) + 0.5
    pos = torch.randint(0, 1 << 20, (9,), generator=gen)
    assert torch.equal(tri.index_key_records(x, w, 1e-6, pos, FREQ),
                       ref.index_key_records(x, w, 1e-6, pos, FREQ))


@triton.jit
def _encode_kernel(x_ptr, o8_ptr, o4_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    x = tl.load(x_ptr + i)
    tl.store(o8_ptr + i, tri._e4m3_code(tl.minimum(tl.maximum(x, -448.0), 448.0)))
    tl.store(o4_ptr + i, tri._e2m1_code(tl.minimum(tl.maximum(x, -6.0), 6.0)))


def test_encoders_on_ties_and_binade_edges():
    grid = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (grid[1:] + grid[:-1]) / 2
    near = torch.cat([grid, mids, mids.nextafter(torch.tensor(0.0)),
                      mids.nextafter(torch.tensor(1e9)), torch.tensor([-0.0, 0.0])])
    x = torch.cat([near, -near])
    n = triton.next_power_of_2(x.numel())
    x = torch.cat([x, torch.zeros(n - x.numel())])
    o8 = torch.empty(n, dtype=torch.int32)
    o4 = torch.empty(n, dtype=torch.int32)
    _encode_kernel[(1,)](x, o8, o4, N=n)
    want8 = x.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int32)
    assert torch.equal(o8, want8)
    want4 = quant.e2m1_encode(x.clamp(-6, 6)).to(torch.int32)
    assert torch.equal(o4, want4)


def test_cache_write_sm90_compiles():
    sys.path.insert(0, str(Path(__file__).parent))
    from aot_attention_side import SM90_SHARED_LIMIT, compile_cases

    for r in compile_cases("cache_write"):
        print(r)
        assert r["shared"] < SM90_SHARED_LIMIT, r
