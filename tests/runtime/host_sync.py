"""Catches host synchronizations in model code on the CPU (what a CUDA graph capture refuses).

Under :func:`no_host_sync` every aten op is inspected: ops whose output size or value the host
must wait for (``nonzero``, ``unique``, ``masked_select``, boolean-mask indexing, ``.item()`` /
``bool(t)`` / ``int(t)`` via ``_local_scalar_dense``, ``repeat_interleave`` without an output
size) and ``Tensor.tolist`` are recorded. Calls of the model's kernel ops are opaque: their
host wrappers are checked by their own tests, and a reference op may sync (the Triton op the
GPU plan picks must not).
"""

from __future__ import annotations

import contextlib
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from deepinfer.kernels.registry import KernelSet

_SYNCING = {torch.ops.aten.nonzero.default, torch.ops.aten._local_scalar_dense.default,
            torch.ops.aten._unique2.default, torch.ops.aten.unique_dim.default,
            torch.ops.aten.unique_consecutive.default, torch.ops.aten.masked_select.default,
            torch.ops.aten.repeat_interleave.Tensor}


class _Detector(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.opaque = 0
        self.found: list[str] = []

    def record(self, what: str) -> None:
        if not self.opaque:
            where = [f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()
                     if "host_sync.py" not in f.filename and "/torch/" not in f.filename][-3:]
            self.found.append(f"{what} at {' <- '.join(reversed(where))}")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SYNCING and not (func is torch.ops.aten.repeat_interleave.Tensor
                                     and kwargs.get("output_size") is not None):
            self.record(str(func))
        if func is torch.ops.aten.index.Tensor and any(
                i is not None and i.dtype == torch.bool for i in args[1]):
            self.record("boolean-mask indexing")
        return func(*args, **kwargs)


class _OpaqueKernels(KernelSet):
    def __init__(self, inner: KernelSet, detector: _Detector, only: frozenset[str] | None):
        super().__init__()
        self._inner, self._detector, self._only = inner, detector, only

    def backend_of(self, op: str) -> str:
        return self._inner.backend_of(op)

    def __getattr__(self, op: str):
        fn = getattr(self._inner, op)
        if self._only is not None and op not in self._only:
            return fn

        def call(*args, **kwargs):
            self._detector.opaque += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._detector.opaque -= 1
        return call


# aten ops that launch nothing on a GPU (views, allocations)
_NO_LAUNCH = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "slice", "select",
    "unsqueeze", "squeeze", "permute", "t", "transpose", "as_strided", "detach", "alias",
    "split", "split_with_sizes", "unbind", "chunk", "narrow", "empty", "empty_strided",
    "lift_fresh", "view_as_real", "unfold", "diagonal", "movedim"})


class _LaunchCounter(_Detector):
    """Records every aten op of model code that would launch a GPU kernel (not a view or an
    allocation), except inside ``attend_records``: the GPU plan runs that as one kernel op, the
    CPU reference composes it from torch ops."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if not self.opaque and name not in _NO_LAUNCH and not any(
                f.name == "attend_records" for f in traceback.extract_stack()):
            self.record(name)
        return func(*args, **kwargs)


@contextlib.contextmanager
def model_launches(model):
    """Like :func:`no_host_sync`, but yields the list of model-code ops that would launch a GPU
    kernel (``"op at file:line <- ..."``), kernel ops opaque."""
    with no_host_sync(model, detector=_LaunchCounter()) as found:
        yield found


@contextlib.contextmanager
def no_host_sync(model, opaque_ops: frozenset[str] | None = None,
                 detector: _Detector | None = None):
    """Run the block with ``model.kernels`` opaque (only ``opaque_ops`` if given: the other ops'
    reference code is then inspected too); yields the list of syncs found (filled on exit)."""
    detector = detector or _Detector()
    inner = model.kernels
    tolist = torch.Tensor.tolist

    def traced_tolist(t):
        detector.record("Tensor.tolist")
        return tolist(t)

    model.kernels = _OpaqueKernels(inner, detector, opaque_ops)
    torch.Tensor.tolist = traced_tolist
    try:
        with detector:
            yield detector.found
    finally:
        torch.Tensor.tolist = tolist
        model.kernels = inner
