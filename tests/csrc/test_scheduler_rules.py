"""Hand-checked cases for each scheduler rule (scheduler.h) and every error message."""

import numpy as np
import pytest
import torch

from deepinfer import _C

PREFILL, DECODE = _C.Phase.PREFILL, _C.Phase.DECODE


def make(**kw) -> _C.Scheduler:
    base = dict(block_size=4, num_blocks=64, num_state_slots=9, max_model_len=128)
    base.update(kw)
    return _C.Scheduler(_C.SchedulerConfig(**base))


def rows(p: _C.StepPlan) -> list[tuple[int, int, int]]:
    return list(zip(p.seq_ids.tolist(), p.start_pos.tolist(), p.num_tokens.tolist(), strict=True))


def commit_all(s: _C.Scheduler, p: _C.StepPlan, finished=None) -> list[int]:
    return s.commit(p.step_id, np.ones(p.num_rows, np.int32), finished)


def test_image_spans_bound_chunks():
    s = make(max_num_batched_tokens=64, prefill_chunk_size=8)
    s.add_request(1, 30, 4, image_spans=[(6, 9), (12, 26)])
    p = s.schedule()
    assert rows(p) == [(1, 0, 6)]  # 0..8 would cut [6, 9): the chunk ends before it
    commit_all(s, p)
    assert rows(s.schedule()) == [(1, 6, 6)]  # 6..14 would cut [12, 26): ends at 12
    p = s.schedule()
    assert rows(p) == [(1, 12, 14)]  # the span starts the chunk: taken whole (14 > chunk 8)
    p = s.schedule()
    assert rows(p) == [(1, 26, 4)] and p.samples.tolist() == [True]


def test_image_span_not_fitting_budget_ends_chunk_before_it():
    s = make(max_num_batched_tokens=10, prefill_chunk_size=10)
    s.add_request(1, 4, 4)
    s.add_request(2, 20, 4, image_spans=[(0, 8)])  # 8 > the 6 tokens left this step
    p = s.schedule()
    assert rows(p) == [(1, 0, 4)]  # request 2 waits (strict FIFO: nothing partial inside)
    p = s.schedule()  # 2 has work and is admitted: a prefill step before decoding 1
    assert rows(p) == [(2, 0, 10)]


def test_chunked_prefill_continues_before_new_and_fifo_blocks():
    s = make(max_num_batched_tokens=8, prefill_chunk_size=8, max_num_seqs=2)
    s.add_request(1, 20, 2)
    s.add_request(2, 3, 2)
    s.add_request(3, 3, 2)
    assert rows(s.schedule()) == [(1, 0, 8)]
    assert rows(s.schedule()) == [(1, 8, 8)]  # the partial one continues first
    assert rows(s.schedule()) == [(1, 16, 4), (2, 0, 3)]  # budget left: next in FIFO order
    # max_num_seqs=2 is reached: 3 is blocked at the head of the queue, so this is a decode step
    p = s.schedule()
    assert p.phase == DECODE and rows(p) == [(1, 20, 1), (2, 3, 1)]
    assert s.waiting_ids() == [3]


def three_sequences(structured: bool = False) -> _C.Scheduler:
    """7 usable blocks of 4 tokens (one kept in reserve by allocation); 3 prompts of 4 tokens."""
    s = make(num_blocks=8, max_model_len=24, max_num_batched_tokens=64, decode_buckets=[1, 2, 4])
    s.add_request(1, 4, 12)
    s.add_request(2, 4, 12)
    s.add_request(3, 4, 12, structured_output=structured)
    return s


def test_decode_order_preemption_recompute_and_stale_commit():
    s = three_sequences()
    p = s.schedule()
    assert rows(p) == [(1, 0, 4), (2, 0, 4), (3, 0, 4)] and p.samples.all()
    commit_all(s, p)
    p = s.schedule()  # room for position 4 + 1 token: a second block each (4 free, reserve used)
    assert p.phase == DECODE and rows(p) == [(1, 4, 1), (2, 4, 1), (3, 4, 1)] and p.bucket == 4
    assert p.block_tables.shape == (4, s.block_table_width)
    assert p.block_tables[3].tolist() == [0] * s.block_table_width and p.state_slots[3] == 0
    commit_all(s, p)
    for _ in range(2):
        commit_all(s, s.schedule())
    p4 = s.schedule()  # positions 7: still 2 blocks each; not committed yet (zero-overhead)
    step4, epoch3 = p4.step_id, s.request(3)["epoch"]
    # next room is 9 tokens = 3 blocks each, 1 block free: 1 (short end) takes it, 2 needs one:
    # 3 (longest end; equal lengths -> highest id) is preempted, which frees enough for 2
    p5 = s.schedule()
    assert p5.preempted == [3] and p5.seq_ids.tolist() == [1, 2]
    assert s.waiting_ids() == [3]
    r3 = s.request(3)
    assert r3["state"] == "waiting" and r3["num_computed_tokens"] == 0
    assert r3["epoch"] != epoch3 and r3["num_output_tokens"] == 4  # recompute keeps outputs
    assert s.commit(step4, np.ones(3, np.int32)) == [2]  # row 2 (sequence 3) is stale: dropped
    assert s.request(3)["num_output_tokens"] == 4
    s.check_integrity()


def test_structured_output_finishes_as_preempted():
    s = three_sequences(structured=True)
    for _ in range(5):
        commit_all(s, s.schedule())
    p = s.schedule()
    assert p.preempted == [3] and s.take_finished() == [(3, "preempted")]
    assert s.request(3) is None and s.waiting_ids() == []


def test_finish_reasons_and_prompt_mode():
    s = make(max_num_batched_tokens=64)
    s.add_request(1, 4, 2)
    s.add_request(2, 4, 5)
    commit_all(s, s.schedule())
    p = s.schedule()
    commit_all(s, p, finished=np.array([False, True]))
    assert s.take_finished() == [(1, "length"), (2, "stop")]
    assert s.usage() == 0.0
    s = make(mode=_C.SchedulerMode.PROMPT, max_num_batched_tokens=4, prefill_chunk_size=4)
    s.add_request(1, 6, 9)
    p = s.schedule()
    assert p.phase == PREFILL and rows(p) == [(1, 0, 4)] and p.samples.tolist() == [False]
    commit_all(s, p)
    p = s.schedule()
    commit_all(s, p)
    assert s.take_finished() == [(1, "prompt_done")]
    p = s.schedule()
    assert p.phase == PREFILL and p.num_rows == 0  # PROMPT mode: always prefill, maybe empty


def test_completion_mode_decodes_directly():
    s = make(mode=_C.SchedulerMode.COMPLETION, decode_buckets=[8])
    s.add_request(1, 10, 3)
    s.add_request(2, 7, 3)
    p = s.schedule()
    assert p.phase == DECODE and rows(p) == [(1, 10, 1), (2, 7, 1)] and p.bucket == 8


def test_watermark_blocks_new_but_not_continuations():
    s = make(
        num_blocks=11,
        max_model_len=36,
        max_num_batched_tokens=8,
        prefill_chunk_size=8,
        prefill_watermark=0.5,
    )  # 10 usable blocks
    s.add_request(1, 28, 4)
    s.add_request(2, 4, 4)
    assert rows(s.schedule()) == [(1, 0, 8)]  # usage 0.2
    assert rows(s.schedule()) == [(1, 8, 8)]  # usage 0.4
    p = s.schedule()  # usage 0.6 > 0.5: 1 continues, 2 is not admitted
    assert rows(p) == [(1, 16, 8)]
    p = s.schedule()
    assert rows(p) == [(1, 24, 4)]
    assert s.waiting_ids() == [2]


def test_vote_interval_all_points():
    s = make(vote_interval_steps=2)
    s.add_request(1, 4, 4)
    assert s.vote1_local() == 1
    # step 0 is an ANY point: admission runs when any rank has work
    assert s.apply_vote1(False, True) == 1
    assert s.finish_step(True).phase == PREFILL
    s.add_request(2, 4, 4)
    # step 1 is an ALL point: another rank has no work, so no admission, decode
    assert s.apply_vote1(False, True) == 0
    p = s.finish_step(False)
    assert p.phase == DECODE and p.seq_ids.tolist() == [1]
    # a rank that admitted nothing in a PREFILL step runs an empty batch
    t = make()
    assert t.apply_vote1(True, True) == 0
    p = t.finish_step(True)
    assert p.phase == PREFILL and p.num_rows == 0 and p.bucket == -1


def test_buckets_and_padding():
    s = make(decode_buckets=[2, 4], prefill_token_buckets=[4, 16], max_num_batched_tokens=64)
    for i in range(3):
        s.add_request(i, 5, 8)
    p = s.schedule()
    assert p.num_batched_tokens == 15 and p.bucket == 16 and p.num_padded_rows == 3
    commit_all(s, p)
    p = s.schedule()
    assert p.num_rows == 3 and p.bucket == 4 and p.num_padded_rows == 4
    assert p.state_slots.tolist() == [1, 2, 3, 0]
    assert not p.block_tables.flags.writeable
    s2 = make(decode_buckets=[2], max_num_batched_tokens=64)
    for i in range(3):
        s2.add_request(i, 4, 8)
    commit_all(s2, s2.schedule())
    p = s2.schedule()
    assert p.bucket == -1 and p.num_padded_rows == 3  # no planned bucket fits 3 rows


def test_prepare_sample_values_and_caller_buffers():
    s = make(max_num_batched_tokens=64)
    s.add_request(1, 5, 4, temperature=0.5, top_p=0.9, top_k=20, min_p=0.05, seed=7)
    s.add_request(2, 3, 4)
    p = s.schedule()
    m = s.prepare_sample(p.seq_ids, p.epochs, p.is_prefill, p.num_tokens, p.seq_lens)
    assert m.num_rows == 2 and m.num_stale == 0
    assert m.temperature.tolist() == [0.5, 1.0] and m.top_k.tolist() == [20, 0]
    assert m.top_p.tolist() == pytest.approx([0.9, 1.0]) and m.seeds.tolist() == [7, -1]
    assert m.min_p.tolist() == pytest.approx([0.05, 0.0])
    assert m.logits_index.tolist() == [4, 7] and m.offsets.tolist() == [5, 3]
    out = (
        torch.zeros(4, dtype=torch.float32).numpy(),
        np.zeros(4, np.float32),
        np.zeros(4, np.int32),
        np.zeros(4, np.float32),
        np.zeros(4, np.int64),
        np.zeros(4, np.int64),
        np.zeros(4, np.int32),
    )
    s.abort(2)  # its row is now stale: default parameters, counted
    assert (
        s.prepare_sample_into(out, p.seq_ids, p.epochs, p.is_prefill, p.num_tokens, p.seq_lens) == 1
    )
    assert out[0].tolist()[:2] == [0.5, 1.0] and out[6].tolist()[:2] == [4, 7]


def test_errors_have_clear_messages():
    s = make(max_num_batched_tokens=16, decode_buckets=[4])
    with pytest.raises(ValueError, match="longer than max_model_len 128"):
        s.add_request(1, 100, 29)
    tiny = make(num_blocks=5)  # 4 usable blocks of 4, one reserve: 12 tokens at most
    with pytest.raises(ValueError, match="can never fit in the cache"):
        tiny.add_request(1, 8, 5)
    with pytest.raises(ValueError, match="image span .* sorted, disjoint"):
        s.add_request(1, 10, 2, image_spans=[(5, 8), (2, 4)])
    with pytest.raises(ValueError, match="image span of 20 tokens exceeds max_num_batched"):
        s.add_request(1, 30, 2, image_spans=[(0, 20)])
    with pytest.raises(ValueError, match="top_p must be in"):
        s.add_request(1, 4, 2, top_p=0.0)
    s.add_request(1, 4, 2)
    with pytest.raises(ValueError, match="sequence id 1 already exists"):
        s.add_request(1, 4, 2)
    for op in (s.abort, s.finish):
        with pytest.raises(ValueError, match="unknown sequence id 99"):
            op(99)
    s.finish(1)
    with pytest.raises(ValueError, match="finish: unknown sequence id 1 .*finished"):
        s.finish(1)  # double finish
    with pytest.raises(ValueError, match="finish_step: no step in progress"):
        s.finish_step(False)
    s.add_request(2, 4, 2)
    assert s.apply_vote1(True, True) == 1
    with pytest.raises(ValueError, match="add_request: a step is between"):
        s.add_request(3, 4, 2)
    with pytest.raises(ValueError, match="any_admitted is false but this rank admitted"):
        s.finish_step(False)
    p = s.finish_step(True)
    step = p.step_id
    with pytest.raises(ValueError, match="has 1 rows, got 2 results"):
        s.commit(step, np.ones(2, np.int32))
    with pytest.raises(ValueError, match=r"accepted 2 tokens, must be in \[1, 1\]"):
        s.commit(step, np.full(1, 2, np.int32))
    s.commit(step, np.ones(1, np.int32))
    with pytest.raises(ValueError, match="unknown step id .* already committed"):
        s.commit(step, np.ones(1, np.int32))
    s.add_request(3, 4, 2)
    p = s.schedule()
    args = [p.seq_ids, p.epochs, p.is_prefill, p.num_tokens, p.seq_lens]
    mixed = np.array([True, False])
    with pytest.raises(ValueError, match="batch mixes prefill and decode rows"):
        s.prepare_sample(
            np.array([2, 3]),
            np.zeros(2, np.int64),
            mixed,
            np.ones(2, np.int32),
            np.full(2, 4, np.int32),
        )
    with pytest.raises(ValueError, match="<= max_model_len"):
        s.prepare_sample(*args[:4], np.full(p.num_rows, 129, np.int32))
    with pytest.raises(ValueError, match="exceeds the .* tokens its block table covers"):
        s.prepare_sample(*args[:4], np.full(p.num_rows, 100, np.int32))
    with pytest.raises(ValueError, match="same length"):
        s.prepare_sample(p.seq_ids, p.epochs, p.is_prefill, p.num_tokens, np.ones(9, np.int32))
    with pytest.raises(ValueError, match="decode_buckets must be strictly increasing"):
        make(decode_buckets=[4, 2])
    with pytest.raises(ValueError, match="block 0 is a"):
        make(num_blocks=1)


def test_block_manager_shared_blocks_and_double_free():
    bm = _C.BlockManager(num_blocks=10, block_size=4, num_state_slots=4)
    bm.allocate(1, 8)
    bm.fork(1, 2)  # both full blocks shared
    assert [bm.ref_count(b) for b in (1, 2)] == [2, 2]
    bm.free(1)  # freeing one holder of a shared block only drops the count
    assert [bm.ref_count(b) for b in (1, 2)] == [1, 1] and bm.num_free_blocks() == 7
    bm.free(2)
    assert bm.num_free_blocks() == 9
    with pytest.raises(ValueError, match="free: unknown sequence id 2 .*already freed"):
        bm.free(2)
    bm.check_integrity()


def test_failed_allreduce_leaves_scheduler_usable():
    s = make()
    s.add_request(1, 4, 4)
    calls = []

    def flaky(values: list[int]) -> list[int]:
        calls.append(values)
        if len(calls) == 2:
            raise ConnectionError("peer gone")
        return values

    with pytest.raises(ConnectionError, match="peer gone"):
        s.schedule(flaky)
    assert not s.step_pending and s.waiting_ids() == [1] and s.usage() == 0.0
    with pytest.raises(ValueError, match="returned 1 values for 2"):
        s.schedule(lambda values: values[:1])
    p = s.schedule(lambda values: values)
    assert p.phase == PREFILL and p.seq_ids.tolist() == [1]


def test_span_starting_a_chunk_exactly_filling_the_budget_is_taken():
    s = make(max_num_batched_tokens=8, prefill_chunk_size=4)
    s.add_request(1, 20, 4, image_spans=[(0, 8)])
    assert rows(s.schedule()) == [(1, 0, 8)]  # longer than the chunk, equal to the budget
    s.add_request(2, 20, 4, image_spans=[(0, 6)])
    assert rows(s.schedule()) == [(1, 8, 4)]  # 2's span needs 6 > the 4 tokens left
    assert rows(s.schedule()) == [(1, 12, 4)]
    assert rows(s.schedule()) == [(1, 16, 4)]
    assert rows(s.schedule()) == [(2, 0, 6)]  # the whole budget is free: the span fits


def test_fork_shares_valid_kv_and_emits_copies():
    s = make(max_num_batched_tokens=64, decode_buckets=[2])
    s.add_request(1, 6, 10, temperature=0.5, seed=1)
    commit_all(s, s.schedule())  # prefill 6 tokens: blocks [1, 2]
    p = s.schedule()  # decode at position 6: room 7, no new block
    with pytest.raises(ValueError, match="must be decoding with no uncommitted step"):
        s.fork(1, 2)
    commit_all(s, p)  # 7 valid KV tokens: block 1 full (shared), block 2 partial (copied)
    with pytest.raises(ValueError, match="fork: unknown sequence id 9"):
        s.fork(9, 2)
    with pytest.raises(ValueError, match="child sequence id 1 already exists"):
        s.fork(1, 1)
    s.fork(1, 2, seed=5)
    assert s.block_table(2) == [1, 3] and s.ref_count(1) == 2 and s.ref_count(2) == 1
    p = s.schedule()
    assert p.block_copies.tolist() == [[2, 3]] and p.slot_copies.tolist() == [[1, 2]]
    assert rows(p) == [(1, 7, 1), (2, 7, 1)]  # the child continues from the same position
    m = s.prepare_sample(p.seq_ids, p.epochs, p.is_prefill, p.num_tokens, p.seq_lens)
    assert m.seeds.tolist() == [1, 5] and m.temperature.tolist() == [0.5, 0.5]
    commit_all(s, p)
    assert s.schedule().block_copies.shape == (0, 2)  # emitted once
    s.check_integrity()
