"""The model code's own GPU launches in a prefill step (kernel ops opaque): each is ~30-50 µs
of host enqueue on the H200 machine (docs/performance.md, round 132a: a lone prompt's layers
are host-paced), so the count is held to a budget, like the decode step's
(tests/runtime/test_batched_decode.py ``MAX_DECODE_LAUNCHES``)."""

from __future__ import annotations

import collections

import torch
from host_sync import model_launches
from paged_helpers import garbage_pool, tiny_model

from deepinfer.runtime.model.batch import ForwardBatch

# session 31: 109 for a 60-token prompt on the engine's paged pools (8 of them the reference
# grouped_linear's non-contiguous output being flattened: no launch on the GPU path)
MAX_PREFILL_LAUNCHES = 115


def test_paged_prefill_launches_few_model_code_ops():
    """A 60-token prompt through the engine's paged pools (every index layer scores and
    picks): at most ``MAX_PREFILL_LAUNCHES`` model-code torch ops launch a GPU kernel and no
    record is packed in torch."""
    model = tiny_model()
    pool = garbage_pool(model.spec, num_blocks=40, num_slots=3)
    ids = torch.randint(3, 500, (60,), generator=torch.Generator().manual_seed(5)).tolist()
    batch = ForwardBatch.build([ids], [pool.view(torch.arange(1, 20), 1, 0)])
    with model_launches(model) as found:
        model(batch)
    where = collections.Counter(line.split(" at ")[1].split(" <- ")[0] for line in found)
    assert len(found) <= MAX_PREFILL_LAUNCHES, \
        f"{len(found)} launches in a prefill step; most from: {where.most_common(8)}"
    assert not any("formats.py" in line for line in found), "records packed in torch"
