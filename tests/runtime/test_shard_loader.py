"""Weights from the plan's shard map: each rank's tensors equal the full model's, coverage first.

The oracle is ``load_model`` (the whole synthetic checkpoint into the plain model): a rank's
replicated tensors must equal the full model's by name, and its local expert slot j of layer L
must equal the full model's expert ``slot_logical[L][j]``.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch
from plan_helpers import dp2_checkpoint_plan, tiny_plans

from deepinfer.artifacts.plan_schema import PlanError
from deepinfer.runtime.model_loader import load_model
from deepinfer.runtime.shard_loader import load_rank_model, rank_shard
from deepinfer.runtime.weights import CheckpointError
from deepinfer.runtime.weights import shards as shards_module
from deepinfer.runtime.weights.shards import INDEX_FILE

MISSING = "layers.3.ffn.experts.5.w2.weight"  # logical expert 5: rank 1's in the dp2-ep2 plan


@pytest.fixture(scope="module")
def full():
    return load_model("builtin:tiny", "synthetic", seed=0).model.state_dict()


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    return tiny_plans(tmp_path_factory)


@pytest.fixture(scope="module")
def ckpt_plan(tmp_path_factory):
    """The dp2-ep2 topology over a checkpoint directory (same seed as the synthetic weights)."""
    return dp2_checkpoint_plan(tmp_path_factory.mktemp("ckpt"))


def assert_equals_full(model, full):
    state = model.state_dict()
    for name, tensor in state.items():
        source = name
        if ".ffn.experts." in name:
            parts = name.split(".")
            parts[4] = str(model.layers[int(parts[1])].ffn.slot_logical[int(parts[4])])
            source = ".".join(parts)
        assert tensor.dtype == full[source].dtype and torch.equal(tensor, full[source]), name
    return state


@pytest.mark.parametrize("plan_name,rank", [("tiny-cpu", 0), ("tiny-cpu-dp2-ep2", 0),
                                            ("tiny-cpu-dp2-ep2", 1)])
def test_synthetic_rank_equals_full_model(plans, full, plan_name, rank):
    plan = plans[plan_name]
    model = load_rank_model(plan, rank).model
    state = assert_equals_full(model, full)
    ws = plan.plan["weight_shards"]
    k = ws["slots_per_rank"]
    assert all(len(block.ffn.experts) == k for block in model.layers)
    expected = {(layer, slot, e) for layer, slot, e in ws["ranks"][rank]["expert_slots"]}
    held = {(b.attn.layer.layer_id, b.ffn.slot_offset + j, e)
            for b in model.layers for j, e in enumerate(b.ffn.slot_logical)}
    assert held == expected
    assert not any(t.is_meta for t in state.values())


def test_ranks_together_hold_every_expert(plans):
    plan = plans["tiny-cpu-dp2-ep2"]
    logical = [set(), set()]
    for rank in (0, 1):
        for layer, e in enumerate(rank_shard(plan, rank).slot_logical):
            logical[rank] |= {(layer, x) for x in e}
    assert not logical[0] & logical[1]
    assert logical[0] | logical[1] == {(layer, e) for layer in range(8) for e in range(8)}


def test_checkpoint_rank_equals_full_model(ckpt_plan, full):
    plan, _ = ckpt_plan
    assert_equals_full(load_rank_model(plan, 1).model, full)


def test_missing_expert_tensor_fails_before_any_data_is_read(ckpt_plan, tmp_path, monkeypatch):
    plan, ckpt = ckpt_plan
    index = json.loads((ckpt / INDEX_FILE).read_text())
    del index["weight_map"][MISSING]
    broken = tmp_path / "ckpt"
    broken.mkdir()
    for f in ckpt.iterdir():
        (broken / f.name).symlink_to(f)
    (broken / INDEX_FILE).unlink()
    (broken / INDEX_FILE).write_text(json.dumps(index))
    raw = copy.deepcopy(plan.plan)
    raw["topology"]["model"]["path"] = str(broken)
    broken_plan = dataclasses.replace(plan, plan=raw)

    def no_reads(*args, **kwargs):
        raise AssertionError("tensor data was read before the coverage check failed")

    monkeypatch.setattr(shards_module, "load_tensors", no_reads)
    with pytest.raises(CheckpointError) as err:
        load_rank_model(broken_plan, 1)
    assert MISSING in str(err.value) and "rank 1" in str(err.value)
    monkeypatch.undo()
    load_rank_model(broken_plan, 0)  # rank 0 holds no copy of expert 5: it does not need it


def test_row_sharded_engram_is_refused_naming_the_field(plans):
    plan = plans["tiny-cpu-dp2-ep2"]
    raw = copy.deepcopy(plan.plan)
    layer, begin, end = raw["weight_shards"]["ranks"][1]["engram_rows"][0]
    raw["weight_shards"]["ranks"][1]["engram_rows"][0] = [layer, begin, end // 2]
    with pytest.raises(PlanError, match=r"weight_shards\.ranks\[1\]\.engram_rows"):
        rank_shard(dataclasses.replace(plan, plan=raw), 1)


def test_slots_that_disagree_with_the_placement_are_refused(plans):
    plan = plans["tiny-cpu-dp2-ep2"]
    raw = copy.deepcopy(plan.plan)
    raw["weight_shards"]["ranks"][0]["expert_slots"][0][2] = 7  # slot 0 of layer 0 holds 0
    with pytest.raises(PlanError, match=r"expert_slots.*phy2log"):
        rank_shard(dataclasses.replace(plan, plan=raw), 0)
