"""What a launch wrapper asks the host again and again, answered once: a device's compute
capability and the TMA descriptors of long-lived tensors (weights).

Why: a lone 4K prompt's first layer is enqueued while the GPU waits (the host-paced start,
``bench/prefill.py --host-timeline-held``, H100 round 234): ``torch.cuda.get_device_capability``
costs a driver query per call, and a Gluon ``TensorDescriptor`` a dataclass build with its
checks (~10 µs each) — a layer built ~25 of them, ~half over weights that never change.

``weight_descriptor(owner, view, block_shape, layout, make)`` keeps the descriptor of ``view`` (a
tensor over ``owner``'s storage, e.g. ``owner.reshape(...)``) on ``owner`` itself (a Python
attribute: it lives and dies with the weight), one per (view dtype, shape, strides, block,
layout); built anew — replacing the old one — when ``owner``'s storage moved (``param.data =
...``).
Only for tensors whose storage outlives the launch: a descriptor holds its base's address.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

_ATTR = "_deepinfer_tma_descriptors"


@functools.cache
def sm_major(device: torch.device) -> int:
    """The compute capability's major version of a CUDA device (asked once per device)."""
    return torch.cuda.get_device_capability(device)[0]


def weight_descriptor(owner: torch.Tensor, view: torch.Tensor, block_shape: list[int],
                      layout: Any, make: Callable[..., Any]) -> Any:
    """``make(view, shape, strides, block_shape, layout)`` (a TensorDescriptor class), built
    once per (view's dtype, shape and strides, block, layout) while ``owner`` keeps its
    storage."""
    key = (view.dtype, tuple(view.shape), tuple(view.stride()), tuple(block_shape), layout)
    cache = owner.__dict__.get(_ATTR)
    if cache is None:
        cache = owner.__dict__[_ATTR] = {}
    ptr = view.data_ptr()
    hit = cache.get(key)
    if hit is not None and hit[0] == ptr:
        return hit[1]
    desc = make(view, list(view.shape), list(view.stride()), list(block_shape), layout)
    cache[key] = (ptr, desc)
    return desc
