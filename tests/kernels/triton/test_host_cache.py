"""kernels/triton/host_cache.py: a weight's TMA descriptor is built once per view and block,
rebuilt when the weight's storage moves, and never shared between views or owners."""

import torch

from deepinfer.kernels.triton.host_cache import weight_descriptor


def _maker(log):
    def make(view, shape, strides, block, layout):
        log.append((view.data_ptr(), tuple(shape), tuple(strides), tuple(block), layout))
        return object()
    return make


def test_built_once_per_view_block_and_layout():
    log = []
    make = _maker(log)
    w = torch.nn.Parameter(torch.zeros(64, 32, dtype=torch.uint8), requires_grad=False)
    first = weight_descriptor(w, w, [16, 32], "L", make)
    assert weight_descriptor(w, w, [16, 32], "L", make) is first and len(log) == 1
    flat = w.reshape(-1, 16)  # a new view object each call, as tiled_descriptor makes
    a = weight_descriptor(w, flat, [8, 16], "L", make)
    assert weight_descriptor(w, w.reshape(-1, 16), [8, 16], "L", make) is a
    assert len({id(first), id(a)}) == 2 and log[-1][1:4] == ((128, 16), (16, 1), (8, 16))
    b = weight_descriptor(w, w, [32, 32], "L", make)  # another block: its own
    c = weight_descriptor(w, w, [16, 32], "M", make)  # another layout: its own
    d = weight_descriptor(w, w.view(torch.int8), [16, 32], "L", make)  # another dtype
    assert len({id(x) for x in (first, a, b, c, d)}) == 5 and len(log) == 5
    other = torch.zeros(64, 32, dtype=torch.uint8)
    assert weight_descriptor(other, other, [16, 32], "L", make) is not first  # per owner


def test_rebuilt_when_the_storage_moves():
    log = []
    make = _maker(log)
    w = torch.nn.Parameter(torch.zeros(64, 32, dtype=torch.uint8), requires_grad=False)
    old = weight_descriptor(w, w, [16, 32], "L", make)
    w.data = torch.ones(64, 32, dtype=torch.uint8)  # what module.to / a packing does
    new = weight_descriptor(w, w, [16, 32], "L", make)
    assert new is not old and log[-1][0] == w.data_ptr() != log[0][0]
    assert weight_descriptor(w, w, [16, 32], "L", make) is new and len(log) == 2
