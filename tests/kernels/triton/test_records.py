"""Record packing and unpacking kernels (kernels/triton/records.py) against kernels/formats.py,
byte for byte (bf16 outputs compared as bit patterns; NaN positions must agree).

Unpacking runs over every byte value (all e4m3 codes with NaN, every e2m1 pair, ue8m0 scale
bytes 0 and 255, e4m3 scales with NaN): pools hold garbage where nothing was written, and a
kernel must decode it as the reference does. Packing runs over rows spanning many binades with
zeros, ties, and blocks holding an infinity or a NaN.
"""

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from deepinfer.kernels import formats  # noqa: E402
from deepinfer.kernels.triton import records as tri  # noqa: E402


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    bits = torch.int16 if want.dtype == torch.bfloat16 else torch.int32
    assert torch.equal(got.masked_fill(nan, 0).view(bits), want.masked_fill(nan, 0).view(bits))


def _garbage(rows: int, record_bytes: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rec = torch.randint(0, 256, (rows, record_bytes), generator=g, dtype=torch.uint8)
    rec[:, :256] = torch.arange(256, dtype=torch.uint8).roll(seed)[:record_bytes]  # every byte
    return rec


# per record kind: head dims, where its scale bytes start, and the scale bytes forced into whole
# rows (rows 0, 1, ...) on top of the garbage
UNPACK_CASES = {
    # 2^-127 (subnormal products, rounded once to bf16), NaN, the largest
    "window_kv": ((64, 512), lambda d: d, (0, 255, 254)),
    # e4m3 NaN scales, 448
    "compressed_kv": ((64, 512), lambda d: d // 2, (0x7F, 0x7E)),
    # 2^-127, NaN, 2^-126 (e2m1 0.5 lands on a bf16 subnormal)
    "index_key": ((32, 128), lambda d: d // 2, (0, 255, 1)),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("kind,head_dim", [(kind, d) for kind, (dims, _, _) in
                                           UNPACK_CASES.items() for d in dims])
def test_unpack_every_byte(kind, head_dim, dtype):
    _, scale_start, forced = UNPACK_CASES[kind]
    name = "unpack_index_key" if kind == "index_key" else f"unpack_{kind}"
    nbytes = getattr(formats, f"{kind.removesuffix('_kv')}_record_bytes")(head_dim)
    rec = _garbage(7, nbytes, len(name))
    for row, byte in enumerate(forced):
        rec[row, scale_start(head_dim):] = byte
    _same(getattr(tri, name)(rec, head_dim, dtype), getattr(formats, name)(rec, head_dim, dtype))


def test_unpack_keeps_leading_dims_and_strided_rows():
    rec = _garbage(12, formats.window_record_bytes(64), 4).view(3, 4, -1)
    _same(tri.unpack_window_kv(rec, 64), formats.unpack_window_kv(rec, 64))
    wide = _garbage(5, 200, 5)[:, 10:10 + formats.compressed_record_bytes(64)]  # row stride 200
    _same(tri.unpack_compressed_kv(wide, 64), formats.unpack_compressed_kv(wide, 64))
    empty = torch.empty(0, formats.index_key_record_bytes(32), dtype=torch.uint8)
    assert tri.unpack_index_key(empty, 32).shape == (0, 32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("head_dim", [64, 512])
def test_pack_window_kv_matches_reference(dtype, head_dim):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(9, head_dim, generator=g) * torch.exp(torch.randn(9, 1, generator=g) * 8)
    x[0] = 0.0
    x[1, :32] = 448.0 * 2.0 ** -3  # amax exactly a power of two times 448: no rounding up
    x[1, 32:64] = 1e-30  # below the 1e-4 amax floor
    x[2, 5] = float("inf")
    x[3, 40] = float("nan")
    x[4, 0] = -float("inf")
    x[5, 33] = 3e38
    x = x.to(dtype)
    got = tri.pack_window_kv(x)
    want = formats.pack_window_kv(x)
    # a NaN element's own code is a NaN code whose sign the reference leaves to the platform's
    # NaN propagation (x / NaN scale); every other byte must agree
    nan = torch.cat([torch.isnan(x), torch.zeros(9, head_dim // 32, dtype=torch.bool)], 1)
    assert torch.equal(got[~nan], want[~nan])
    assert set((got[nan] & 0x7F).tolist()) == {0x7F} == set((want[nan] & 0x7F).tolist())
    # the records unpack to the quantized rows
    _same(tri.unpack_window_kv(got, head_dim), formats.unpack_window_kv(want, head_dim))


def test_pack_window_kv_leading_dims():
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    got = tri.pack_window_kv(x)
    assert got.shape == (2, 3, 66) and torch.equal(got, formats.pack_window_kv(x))
    assert tri.pack_window_kv(x[:0]).shape == (0, 3, 66)


def test_records_sm90_compiles():
    sys.path.insert(0, str(Path(__file__).parent))
    from aot_attention_side import SM90_SHARED_LIMIT, compile_cases

    results = compile_cases("records")
    assert len(results) == 4
    for r in results:
        assert r["shared"] < SM90_SHARED_LIMIT and r["wgmma"] == 0, r
