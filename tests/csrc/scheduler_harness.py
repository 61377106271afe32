"""Shared helpers for the scheduler tests: configs, plan snapshots, invariant checks."""

import numpy as np
from scheduler_model import DECODE, PREFILL, Config, ModelScheduler, Plan

from deepinfer import _C

MODES = {0: _C.SchedulerMode.NORMAL, 1: _C.SchedulerMode.PROMPT, 2: _C.SchedulerMode.COMPLETION}


def make_pair(**kw) -> tuple[_C.Scheduler, ModelScheduler]:
    """A C++ scheduler and its Python model built from the same keyword config."""
    cfg = Config(**kw)
    ckw = dict(kw)
    ckw["mode"] = MODES[cfg.mode]
    return _C.Scheduler(_C.SchedulerConfig(**ckw)), ModelScheduler(cfg)


def snapshot(p: _C.StepPlan) -> Plan:
    """Copies a C++ StepPlan (views over buffers the next step overwrites) into a model Plan."""
    rows = list(
        zip(
            p.seq_ids.tolist(),
            p.epochs.tolist(),
            p.start_pos.tolist(),
            p.num_tokens.tolist(),
            p.samples.tolist(),
            strict=True,
        )
    )
    phase = PREFILL if p.phase == _C.Phase.PREFILL else DECODE
    return Plan(
        p.step_id,
        phase,
        rows,
        p.bucket,
        p.num_padded_rows,
        p.block_tables.tolist(),
        p.state_slots.tolist(),
        list(p.preempted),
        [tuple(c) for c in p.block_copies.tolist()],
        [tuple(c) for c in p.slot_copies.tolist()],
    )


def check_plan(plan: Plan, s: _C.Scheduler, spans: dict[int, list[tuple[int, int]]]) -> None:
    """Invariants of one step's output, independent of the model."""
    c = s.config
    assert len(plan.rows) <= c.max_num_seqs
    assert len(plan.block_tables) == len(plan.state_slots) == plan.num_padded_rows
    assert all(len(t) == s.block_table_width for t in plan.block_tables)
    for i in range(len(plan.rows), plan.num_padded_rows):  # padding rows: sentinels
        assert not any(plan.block_tables[i]) and plan.state_slots[i] == 0
    ids = [r[0] for r in plan.rows]
    assert len(set(ids)) == len(ids), "a sequence got two rows"
    if plan.phase == PREFILL:
        tokens = sum(r[3] for r in plan.rows)
        assert tokens <= c.max_num_batched_tokens
        buckets = c.prefill_token_buckets
        fits = [b for b in buckets if b >= tokens]
        assert plan.bucket == (fits[0] if fits else -1)
        for sid, _, start, n, _ in plan.rows:
            assert n >= 1
            end = start + n
            whole_span = any(b == start and e == end for b, e in spans[sid])
            assert n <= c.prefill_chunk_size or whole_span, "chunk larger than chunk size"
            for b, e in spans[sid]:
                assert not b < start < e and not b < end < e, "chunk boundary inside image span"
    else:
        assert all(r[3] == 1 and r[4] for r in plan.rows)
        assert len(plan.rows) <= c.max_num_batched_tokens
        fits = [b for b in c.decode_buckets if b >= len(plan.rows)]
        assert plan.bucket == (fits[0] if fits else -1)
        assert plan.num_padded_rows == (plan.bucket if plan.bucket >= 0 else len(plan.rows))
    for i, (_, _, start, n, _) in enumerate(plan.rows):
        assert plan.state_slots[i] > 0
        table = [b for b in plan.block_tables[i] if b]
        assert 0 not in table[: len(table)]
        assert len(table) * c.block_size >= start + n, "row's tokens beyond its block table"


def check_cache(s: _C.Scheduler) -> None:
    """Block / slot invariants recomputed from public queries (plus check_integrity)."""
    s.check_integrity()
    c = s.config
    live = s.prefilling_ids() + s.running_ids()
    assert len(live) <= c.max_num_seqs, "more live sequences than max_num_seqs"
    holders = [0] * c.num_blocks
    slots = []
    for sid in live:
        table = s.block_table(sid)
        assert 0 not in table, "block 0 owned"
        for b in table:
            holders[b] += 1
        slots.append(s.state_slot(sid))
    assert len(set(slots)) == len(slots) and 0 not in slots
    assert s.num_free_state_slots() + len(live) == c.num_state_slots - 1
    refs = [s.ref_count(b) for b in range(c.num_blocks)]
    assert min(refs) >= 0 and refs == holders
    used = sum(1 for r in refs if r > 0)
    assert used + s.num_free_blocks() == c.num_blocks - 1
    for sid in s.waiting_ids():  # waiting sequences own nothing
        try:
            s.block_table(sid)
        except ValueError:
            continue
        raise AssertionError(f"waiting sequence {sid} owns blocks")


def compare_state(s: _C.Scheduler, m: ModelScheduler) -> None:
    assert s.waiting_ids() == list(m.waiting)
    assert s.prefilling_ids() == m.prefilling
    assert sorted(s.running_ids()) == sorted(m.running)
    assert s.num_free_blocks() == len(m.bm.free_blocks)
    assert s.num_free_state_slots() == len(m.bm.free_slots)
    for sid, r in m.reqs.items():
        d = s.request(sid)
        assert d is not None
        got = (
            d["state"],
            d["epoch"],
            d["num_computed_tokens"],
            d["num_output_tokens"],
            d["num_pending_samples"],
        )
        assert got == (r.state, r.epoch, r.num_computed, r.num_output, r.num_pending)
        if sid in m.bm.seqs:
            assert s.block_table(sid) == m.bm.block_table(sid)


def sample_args(plan: Plan) -> tuple[np.ndarray, ...]:
    rows = plan.rows
    return (
        np.array([r[0] for r in rows], np.int64),
        np.array([r[1] for r in rows], np.int64),
        np.full(len(rows), plan.phase == PREFILL, bool),
        np.array([r[3] for r in rows], np.int32),
        np.array([r[2] + r[3] for r in rows], np.int32),
    )
