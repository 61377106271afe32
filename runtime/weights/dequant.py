"""Checkpoint tensors -> bf16/fp32: the fully dequantized form, and the load-time scale check.

The model holds quantized tensors as stored (``kernels/quantized.py``), so loading only runs
:func:`check_scales`; :func:`dequantize_tensors` is the bf16 form the quantized model must match
bit for bit (``read_checkpoint`` / ``synthetic_weights``, tests):

    fp8      e4m3 [O, I]  + ue8m0 [ceil(O/32), ceil(I/32)]  -> bfloat16 [O, I]
    fp4      int8 [O, I/2] + ue8m0 [O, I/32]                 -> bfloat16 [O, I]
    fp8_rows e4m3 [R, C]  + ue8m0 [R, C/32]                  -> bfloat16 [R, C]
    bf16 / f32                                               -> unchanged

The dequantized values are exact in bf16: an e4m3 code has at most 4 significant bits and an e2m1
code at most 2, each times a power of two, against bf16's 8. (Exact for scale bytes 3..246, i.e.
2^-124..2^119; only scales far outside any real weight's range would under- or overflow bf16.)
``.scale`` tensors are consumed here and do not appear in the result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from deepinfer.artifacts.weight_names import (
    KIND_FP4,
    KIND_FP8,
    KIND_FP8_ROWS,
    SCALE_KINDS,
    TensorSpec,
)
from deepinfer.kernels import formats

_DEQUANTIZERS = {
    KIND_FP8: formats.dequantize_fp8_weight,
    KIND_FP4: formats.dequantize_fp4_weight,
    KIND_FP8_ROWS: formats.dequantize_fp8_rows,
}
_UE8M0_NAN_BYTE = 255
WEIGHT_DTYPE = torch.bfloat16
"""dtype of every dequantized matrix."""


def dequantize_tensors(stored: Mapping[str, torch.Tensor],
                       specs: Iterable[TensorSpec]) -> dict[str, torch.Tensor]:
    """Dequantize the tensors of ``specs`` (scale specs are skipped; their data is consumed).

    Args:
        stored: checkpoint tensors by name in their stored dtypes; must hold every listed weight
            and the ``.scale`` of every quantized one.
        specs: the tensors wanted, in order.
    Returns:
        name -> tensor: quantized kinds as bfloat16 of ``spec.logical_shape``; bf16/f32 as stored.
    Raises:
        ValueError naming the tensor if a scale is corrupt (ue8m0 byte 255 = NaN).
    """
    out: dict[str, torch.Tensor] = {}
    for spec in specs:
        if spec.kind in SCALE_KINDS:
            continue
        tensor = stored[spec.name]
        dequantize = _DEQUANTIZERS.get(spec.kind)
        if dequantize is not None:
            try:
                tensor = dequantize(tensor, stored[spec.scale_name]).to(WEIGHT_DTYPE)
            except ValueError as exc:
                raise ValueError(f"tensor {spec.name}: {exc}") from None
        out[spec.name] = tensor
    return out


def check_scales(stored: Mapping[str, torch.Tensor], specs: Iterable[TensorSpec]) -> None:
    """Reject corrupt ue8m0 scales (byte 255 = NaN) among the ``.scale`` tensors of ``specs``.

    The one data check of loading: the model keeps the scales as stored and the ops do not
    check them per call. Raises ValueError naming the weight, as ``dequantize_tensors`` does.
    """
    for spec in specs:
        if spec.kind not in SCALE_KINDS:
            continue
        scale = stored[spec.name]
        if bool((scale.view(torch.uint8) == _UE8M0_NAN_BYTE).any()):
            weight = spec.name.removesuffix(".scale") + ".weight"
            raise ValueError(f"tensor {weight}: scale byte 255 is NaN in ue8m0; the checkpoint "
                             "data is corrupt")
