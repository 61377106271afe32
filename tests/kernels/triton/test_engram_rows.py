"""The engram table's row gather + dequantization in one launch (kernels/triton/engram_rows.py,
interpreter) against ``Fp8Rows.__getitem__`` (the reference op ``engram_rows``): bit for bit,
any ids shape, repeated and edge rows, scale bytes 0 (2^-127, subnormal) and 255 (NaN); a
plain table indexed as it is; and its sm_90 compile."""

import pytest
import torch

triton = pytest.importorskip("triton")

from deepinfer.kernels import formats  # noqa: E402
from deepinfer.kernels.quantized import Fp8Rows  # noqa: E402
from deepinfer.kernels.reference import engram as ref_engram  # noqa: E402
from deepinfer.kernels.triton import engram_rows  # noqa: E402


def _table(rows: int, cols: int, seed: int) -> Fp8Rows:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * torch.logspace(-3, 3, rows)[:, None]
    codes, scale = formats.quantize_fp8_rows(w)
    return Fp8Rows(codes, scale)


@pytest.mark.parametrize("cols", [32, 256])
@pytest.mark.parametrize("ids_shape", [(7, 3), (40,), (1, 1), (0, 4)])
def test_rows_are_the_references_bits(cols, ids_shape):
    table = _table(50, cols, cols)
    g = torch.Generator().manual_seed(len(ids_shape))
    ids = torch.randint(0, 50, ids_shape, generator=g)
    if ids.numel() > 2:
        ids.view(-1)[:2] = torch.tensor([0, 49])  # the first and last rows
    got = engram_rows.engram_rows(table, ids)
    want = ref_engram.engram_rows(table, ids)
    assert got.dtype == torch.bfloat16 and got.shape == (*ids_shape, cols) == want.shape
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_scale_bytes_0_and_255_as_the_reference():
    """Scale byte 0 is 2^-127 (the fp32 subnormal: tiny codes flush in bf16 only as the
    reference's own cast does), 255 NaN."""
    table = _table(4, 64, 3)
    scale = table.scale.view(torch.uint8)
    scale[1, 0], scale[2, 1] = 0, 255
    ids = torch.tensor([[1, 2], [3, 1]])
    got = engram_rows.engram_rows(table, ids)
    want = ref_engram.engram_rows(table, ids)
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()
    assert torch.equal(torch.nan_to_num(got).view(torch.int16),
                       torch.nan_to_num(want).view(torch.int16))


def test_plain_table_is_indexed():
    table = torch.randn(10, 32).to(torch.bfloat16)
    ids = torch.tensor([[3, 3], [9, 0]])
    assert torch.equal(engram_rows.engram_rows(table, ids), table[ids])


def test_sm90_compile(sm90_compile):
    cases = engram_rows.aot_cases()
    results = sm90_compile(cases)
    assert results[cases[0]["id"]]["error"] is None
