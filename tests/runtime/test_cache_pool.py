"""The paged cache (blocks + state slots) against the contiguous per-sequence cache.

Exact equality (``torch.equal``): the paged view only changes where bytes are stored, never what
is computed (see test_model_incremental.py for why the reference backend is bit-reproducible).
The pools start filled with garbage and block tables are shuffled, so a read of anything the
sequence did not write itself, or a wrong block/row mapping, changes the logits.
"""

import pytest
import torch
from paged_helpers import BLOCK_TOKENS, garbage_pool, tiny_model

from deepinfer.runtime.cache_pool import CachePool
from deepinfer.runtime.model.batch import ForwardBatch
from deepinfer.runtime.model.cache import SequenceCache
from deepinfer.runtime.model.deepseek_v41 import DeepseekV41


@pytest.fixture(scope="module")
def model() -> DeepseekV41:
    return tiny_model()



def test_paged_chunked_batch_equals_contiguous(model):
    spec = model.spec
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 500, (n,), generator=g).tolist() for n in (37, 23, 30)]
    chunk_plan = [[9, 14, 14], [23], [5, 5, 20]]  # chunk sizes per sequence, then decode
    pool = garbage_pool(spec, num_blocks=64, num_slots=5)
    blocks = torch.randperm(63, generator=g) + 1  # shuffled, never the sentinel 0
    tables = [blocks[i * 20:(i + 1) * 20] for i in range(3)]
    slots = [4, 1, 3]
    contiguous = [SequenceCache.empty(spec) for _ in prompts]
    lone = [SequenceCache.empty(spec) for _ in prompts]
    done = [0, 0, 0]
    for step in range(3):
        chunks, paged = [], []
        for b, ids in enumerate(prompts):
            n = chunk_plan[b][step] if step < len(chunk_plan[b]) else 1
            if done[b] + n > len(ids):
                ids.extend(torch.randint(3, 500, (done[b] + n - len(ids),), generator=g).tolist())
            chunks.append(ids[done[b]:done[b] + n])
            paged.append(pool.view(tables[b], slots[b], done[b]))
            done[b] += n
        expect = model(ForwardBatch.build(chunks, contiguous))
        got = model(ForwardBatch.build(chunks, paged))
        assert torch.equal(got, expect), f"step {step}"
        alone = torch.cat([model(ForwardBatch.build([c], [cache]))  # one sequence per step
                           for c, cache in zip(chunks, lone, strict=True)])
        assert torch.equal(alone, expect), f"step {step}: batched against one at a time"


def test_copy_slot_and_block_fork_a_sequence(model):
    """A forked sequence (slot copied, partially filled last block copied, full blocks shared)
    continues exactly like its parent would."""
    spec = model.spec
    ids = torch.randint(3, 500, (10,), generator=torch.Generator().manual_seed(5)).tolist()
    pool = garbage_pool(spec, num_blocks=16, num_slots=4)
    parent_table = torch.tensor([2, 5, 7, 9])
    model(ForwardBatch.build([ids], [pool.view(parent_table, 1, 0)]))
    # 10 tokens = 2 full blocks + a half-filled third; the child copies block 7 into 11.
    pool.copy_slot(1, 2)
    pool.copy_block(7, 11)
    child_table = torch.tensor([2, 5, 11, 12])
    nxt = [[41], [41]]
    parent_out = model(ForwardBatch.build(nxt[:1], [pool.view(parent_table, 1, 10)]))
    child_out = model(ForwardBatch.build(nxt[1:], [pool.view(child_table, 2, 10)]))
    assert torch.equal(parent_out, child_out)


def test_view_rejects_sentinel_slot_and_short_table(model):
    spec = model.spec
    pool = CachePool(spec, 8, 3, BLOCK_TOKENS)
    with pytest.raises(ValueError, match="state slot 0"):
        pool.view(torch.tensor([1]), 0, 0)
    view = pool.view(torch.tensor([1]), 1, 0)
    with pytest.raises(RuntimeError, match="needs block 1 but its table has 1 blocks"):
        model(ForwardBatch.build([list(range(3, 3 + BLOCK_TOKENS + 2))], [view]))


def test_block_size_must_be_a_multiple_of_every_ratio(model):
    with pytest.raises(ValueError, match="not a multiple"):
        CachePool(model.spec, 8, 3, 3)
