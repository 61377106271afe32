"""Reference for the fused engram gather + ``wkv`` projection (model-spec §2.9, §4.3).

Composed from existing reference ops: the FP8 table rows are dequantized with Q8_32's inverse,
gathered, flattened per token, cast to the activation dtype, and fed to ``linear_quant_act``.
"""

import torch

from deepinfer.kernels.reference.linear import linear_quant_act
from deepinfer.kernels.reference.quant import dequant_fp8_ue8m0


def engram_gather_linear(table_codes: torch.Tensor, table_scale: torch.Tensor,
                         hash_ids: torch.Tensor, weight: torch.Tensor,
                         out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``linear_quant_act(dequant(table)[hash_ids].flatten(1).to(out_dtype), weight)``.

    Args:
        table_codes: float8_e4m3fn (R, C); table_scale: float8_e8m0fnu or uint8 (R, C/32), one
            ue8m0 scale per row per 32 columns; hash_ids: int64 (N, n_ids) table rows;
        weight: (O, n_ids * C) dequantized weight.
    Returns:
        (N, O) in out_dtype.
    """
    scale = table_scale.view(torch.uint8) if table_scale.dtype != torch.uint8 else table_scale
    codes = table_codes.view(torch.uint8)[hash_ids].view(torch.float8_e4m3fn)  # gather as bytes
    rows = dequant_fp8_ue8m0(codes, scale[hash_ids], 32, dtype=out_dtype)
    return linear_quant_act(rows.flatten(1), weight.to(out_dtype))
