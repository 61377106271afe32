"""ExpertSlots tracks the largest scale byte of each projection through every write path, and
moe_experts picks its W_ONE_MUL mode from it (2: no per-program check, only when every stack
is known to have scale bytes <= 128)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from deepinfer.kernels.quantized import Mxfp4ExpertWeights
from deepinfer.kernels.triton import moe_experts
from deepinfer.runtime.model.expert_slots import PROJECTIONS, ExpertSlots

DIM, INTER, SLOTS = 64, 32, 3


def _expert(scale_byte: int, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    weight = torch.randint(-128, 128, (rows, cols // 2), dtype=torch.int8)
    scale = torch.full((rows, cols // 32), 120, dtype=torch.uint8)
    scale[rows // 2, 0] = scale_byte
    return weight, scale


def _state_dict(scale_bytes: dict[str, int]) -> dict[str, torch.Tensor]:
    shapes = {"w1": (INTER, DIM), "w2": (DIM, INTER), "w3": (INTER, DIM)}
    sd = {}
    for j in range(SLOTS):
        for w in PROJECTIONS:
            weight, scale = _expert(scale_bytes[w] if j == 1 else 100, *shapes[w])
            sd[f"{j}.{w}.weight"], sd[f"{j}.{w}.scale"] = weight, scale
    return sd


def test_unknown_before_loading_then_tracked_by_load_state_dict():
    slots = ExpertSlots(SLOTS, DIM, INTER)
    assert slots.w1.scale_max is None  # uninitialized stacks: nothing vouched for
    slots.load_state_dict(_state_dict({"w1": 127, "w2": 128, "w3": 200}))
    assert (slots.w1.scale_max, slots.w2.scale_max, slots.w3.scale_max) == (127, 128, 200)
    assert slots[1].w3.scale_max == 200  # a slot's view carries its stack's bound


def test_load_slot_and_copies_raise_the_bound():
    slots = ExpertSlots(SLOTS, DIM, INTER)
    slots.allocate("cpu")
    assert slots.w2.scale_max == 0
    weight, scale = _expert(90, DIM, INTER)
    slots.load_slot(0, "w2", weight, scale)
    assert slots.w2.scale_max == 120
    weight, scale = _expert(131, DIM, INTER)
    slots.load_slot(1, "w2", weight, scale)
    assert slots.w2.scale_max == 131
    other = ExpertSlots(SLOTS, DIM, INTER)
    other.load_state_dict(_state_dict({"w1": 250, "w2": 100, "w3": 100}))
    slots[2] = other[1]
    assert (slots.w1.scale_max, slots.w2.scale_max) == (250, 131)


def test_copy_from_an_untracked_slot_makes_the_bound_unknown():
    slots = ExpertSlots(SLOTS, DIM, INTER)
    slots.load_state_dict(_state_dict({"w1": 100, "w2": 100, "w3": 100}))
    untracked = ExpertSlots(SLOTS, DIM, INTER)  # never loaded: bound unknown
    slots[0] = untracked[0]
    assert slots.w1.scale_max is None


@pytest.mark.parametrize("maxes,wanted,mode", [
    ((120, 128), True, 2),     # every stack vouched <= 128: no per-program check
    ((120, 129), True, 1),     # one scale byte too large for 2^(e - 1): check per program
    ((None, 100), True, 1),    # unknown bound
    ((120, 120), False, 0),    # the config asks for the two-multiply unpack
    ((None, None), 2, 2),      # a benchmark vouching for its own weights
])
def test_one_mul_mode(maxes, wanted, mode):
    ws = [Mxfp4ExpertWeights(torch.zeros(2, 4, 64, dtype=torch.uint8),
                             torch.zeros(2, 4, 4, dtype=torch.uint8), m) for m in maxes]
    assert moe_experts._one_mul_mode(wanted, *ws) == mode


def test_one_mul_mode_needs_word_readable_scales_for_the_check():
    w = Mxfp4ExpertWeights(torch.zeros(2, 4, 16, dtype=torch.uint8),
                           torch.zeros(2, 4, 1, dtype=torch.uint8))  # K/32 = 1: not word-wise
    assert moe_experts._one_mul_mode(True, w) == 0
    assert moe_experts._one_mul_mode(True, dataclasses.replace(w, scale_max=5)) == 2


def test_a_stack_is_built_once_until_its_bound_or_tensors_change():
    """``stack(w)`` hands the same container while nothing changes (a forward asks three a
    layer); a raised bound, another byte order or a new load gives a new one."""
    slots = ExpertSlots(SLOTS, DIM, INTER)
    slots.load_state_dict(_state_dict({"w1": 127, "w2": 128, "w3": 120}))
    first = slots.stack("w2")
    assert slots.stack("w2") is first and slots.stack("w1") is not first
    weight, scale = _expert(140, DIM, INTER)
    slots.load_slot(0, "w2", weight, scale)
    raised = slots.stack("w2")
    assert raised is not first and raised.scale_max == 140
    slots.set_byte_order("words")
    assert slots.stack("w2") is not raised and slots.stack("w2").word_order
    slots.load_state_dict(_state_dict({"w1": 127, "w2": 100, "w3": 120}))
    reloaded = slots.stack("w2")
    assert reloaded.packed is slots._parameters["w2_weight"] and reloaded.scale_max == 120
