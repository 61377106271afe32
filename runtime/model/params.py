"""Parameter holders whose attribute names follow the checkpoint's tensor names (model-spec §4).

Weights stay in the form the checkpoint stores them. A holder's state dict has the checkpoint's
names and dtypes — ``weight`` (bf16 values, or the quantized codes) plus ``scale`` for quantized
tensors — and its ``weight`` attribute is the weight as the ops take it: a bf16 tensor, or a
container of ``kernels/quantized.py`` built over the held codes and scales (the ops dequantize
on the fly, exactly). The form is decided by what is loaded: a ``scale`` next to ``weight``
makes the holder quantized; ``weight`` alone keeps it plain (the fully dequantized form, e.g.
``runtime.weights.synthetic_weights``, loads too and computes the same bits).

A :class:`Linear` remembers whether the checkpoint stored it quantized (``quant_act``), because
GEMMs against quantized weights first quantize their input (Q8_32, model-spec §4.3); ``wo_a`` is
stored FP8 but multiplied without input quantization.
"""

from __future__ import annotations

import torch
from torch import nn

from deepinfer.kernels.quantized import Fp8BlockWeight, Fp8Rows
from deepinfer.kernels.registry import KernelSet

SCALE_DTYPE = torch.float8_e8m0fnu
"""dtype of every held ue8m0 scale (as stored)."""


def _param(shape: tuple[int, ...], dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)


def frozen(t: torch.Tensor) -> nn.Parameter:
    """A loaded tensor as a parameter without gradient (no copy)."""
    return nn.Parameter(t.detach(), requires_grad=False)


class StoredWeight(nn.Module):
    """One checkpoint matrix as stored: ``weight`` [O, I] (+ ``scale`` when quantized).

    Subclasses name the container (``container``) that wraps codes + scale for the ops.
    Loading always takes the given tensors (no copy; moved to the held device when not
    assigning), because the loaded form may differ from the constructed one.
    """

    container: type[Fp8BlockWeight] | type[Fp8Rows] = Fp8BlockWeight

    def __init__(self, shape: tuple[int, int], dtype: torch.dtype,
                 scale_shape: tuple[int, int] | None = None):
        super().__init__()
        self.logical_shape = shape
        self.register_parameter("weight", _param(shape, dtype))
        self.register_parameter("scale", None if scale_shape is None
                                else _param(scale_shape, SCALE_DTYPE))

    @property
    def weight(self) -> torch.Tensor | Fp8BlockWeight | Fp8Rows:  # type: ignore[override]
        """The weight as the ops take it: the bf16 tensor, or a container over codes + scale."""
        params = self.__dict__.get("_parameters", {})
        if "weight" not in params:
            raise AttributeError("weight")  # not registered yet (register_parameter asks)
        scale = params.get("scale")
        if scale is None:
            return params["weight"]
        weight = params["weight"]
        twin = self.__dict__.get("_buffers", {}).get("bf16_twin")
        # the container built once per held tensors (the prefill asks ~10 a layer, each build
        # validates shapes: ~5 µs of host time): rebuilt when a load, a move or a twin changes
        # any of them (the same objects may hold new storage after ``module.to``)
        # (ids are safe keys: the cached container holds those objects alive)
        key = (id(weight), weight.data_ptr(), weight.shape, id(scale), scale.data_ptr(),
               id(twin), None if twin is None else twin.data_ptr())
        cached = self.__dict__.get("_container_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        made = (self.container(weight, scale) if twin is None
                else self.container(weight, scale, twin))
        self.__dict__["_container_cache"] = (key, made)
        return made

    def add_bf16_twin(self) -> int:
        """Hold the FP8 block weight's bf16 twin (``Fp8BlockWeight.bf16``: its dequantized
        values, a non-persistent buffer — the state dict keeps the checkpoint's tensors); the
        bytes added (0: not an FP8 block weight, or it has one)."""
        if (self.container is not Fp8BlockWeight or not self.is_quantized
                or self._buffers.get("bf16_twin") is not None):
            return 0
        twin = self.weight.dequantize()
        self.register_buffer("bf16_twin", twin, persistent=False)
        return twin.nbytes

    @property
    def is_quantized(self) -> bool:
        return self._parameters.get("scale") is not None

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        unexpected_keys.extend(k for k in state_dict if k.startswith(prefix)
                               and k[len(prefix):] not in ("weight", "scale"))
        weight, scale = state_dict.get(prefix + "weight"), state_dict.get(prefix + "scale")
        if weight is None:
            missing_keys.append(prefix + "weight")
            return
        if tuple(weight.shape) != self.logical_shape:
            error_msgs.append(f"size mismatch for {prefix}weight: got {tuple(weight.shape)}, "
                              f"the model has {self.logical_shape}")
            return
        if scale is not None:
            try:
                self.container(weight, scale)
            except ValueError as exc:
                error_msgs.append(f"{prefix}weight/scale: {exc}")
                return
        held = self._parameters["weight"]
        self.__dict__.pop("_container_cache", None)  # not to hold the replaced tensors
        if not local_metadata.get("assign_to_params_buffers", False) and not held.is_meta:
            weight = weight.to(held.device)
            scale = None if scale is None else scale.to(held.device)
        self._parameters["weight"] = frozen(weight)
        self._parameters["scale"] = None if scale is None else frozen(scale)


class Linear(StoredWeight):
    """``weight`` (out, in): bf16, or ``Fp8BlockWeight`` (e4m3 codes + 32×32 ue8m0 tiles) when
    the checkpoint stores it FP8; ``quant_act``: Q8_32-quantize the input first."""

    container = Fp8BlockWeight

    def __init__(self, in_features: int, out_features: int, quant_act: bool,
                 dtype: torch.dtype = torch.bfloat16):
        super().__init__((out_features, in_features), dtype)
        self.quant_act = quant_act

    def forward(self, k: KernelSet, x: torch.Tensor) -> torch.Tensor:
        """(N, in) -> (N, out) in x's dtype; the input is Q8_32-quantized first if quant_act."""
        if self.quant_act:
            return k.linear_quant_act(x, self.weight)
        return k.linear(x, self.weight)

    def rounded(self, k: KernelSet, xq: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` of an input whose Q8_32 values ``xq`` are already at hand (several
        projections of one activation: it is rounded once); ``linear_quant_act`` is by
        definition ``linear`` of those values."""
        assert self.quant_act, "rounded(): a projection without activation quantization"
        return k.linear(xq, self.weight)


class Fp8RowTable(StoredWeight):
    """An engram table (rows, dim): ``weight`` is an ``Fp8Rows`` (codes + per-32 ue8m0 scales;
    ``weight[ids]`` gathers rows, then dequantizes only those), or bf16 rows if loaded so."""

    container = Fp8Rows

    def __init__(self, rows: int, dim: int):
        super().__init__((rows, dim), torch.float8_e4m3fn, (rows, dim // 32))


class Norm(nn.Module):
    """An RMSNorm ``weight`` (dim,)."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = _param((dim,), torch.bfloat16)


def f32_param(*shape: int) -> nn.Parameter:
    return _param(tuple(shape), torch.float32)


def model_bytes(module: nn.Module) -> int:
    """Resident weight bytes: every parameter (quantized codes, scales, bf16/f32 tensors).
    Works on a meta-built module (from shapes, no allocation)."""
    return sum(p.nbytes for p in module.parameters())
