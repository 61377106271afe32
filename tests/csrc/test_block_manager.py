"""deepinfer._C.BlockManager against the pure-Python model (block_manager_model.py)."""

import random

import pytest
from block_manager_model import ModelBlockManager

from deepinfer import _C

NUM_SEEDS = 60
OPS_PER_SEED = 250


def outcome(fn, *args):
    """(result, None) or (None, exception type): what the differential test compares."""
    try:
        return fn(*args), None
    except (ValueError, RuntimeError) as e:
        return None, type(e)


def check_invariants(bm: _C.BlockManager, live: set[int]) -> None:
    """Invariants recomputed from the public queries, independent of check_integrity()."""
    holders = [0] * bm.num_blocks
    slots = []
    for s in live:
        table = bm.block_table(s)
        assert len(table) == -(-bm.num_tokens(s) // bm.block_size)
        assert 0 not in table, "block 0 owned"
        for b in table:
            holders[b] += 1
        slots.append(bm.state_slot(s))
    assert all(0 < s < bm.num_state_slots for s in slots)
    assert len(set(slots)) == len(slots), "state slot owned twice"
    assert bm.num_free_state_slots() + len(live) == bm.num_state_slots - 1
    refs = [bm.ref_count(b) for b in range(bm.num_blocks)]
    assert min(refs) >= 0
    assert refs == holders, "ref counts != number of tables holding the block"
    used = sum(1 for r in refs if r > 0)
    assert used + bm.num_free_blocks() == bm.num_usable_blocks
    assert bm.usage() == pytest.approx(used / bm.num_usable_blocks)


def compare_state(cpp: _C.BlockManager, py: ModelBlockManager, live: set[int]) -> None:
    assert cpp.num_sequences() == len(py.seqs) == len(live)
    assert cpp.num_free_blocks() == len(py.free_blocks)
    assert cpp.num_free_state_slots() == len(py.free_slots)
    assert cpp.usage() == pytest.approx(py.usage())
    for s in live:
        assert cpp.block_table(s) == py.block_table(s)
        assert cpp.state_slot(s) == py.state_slot(s)
        assert cpp.num_tokens(s) == py.seqs[s].num_tokens
    assert [cpp.ref_count(b) for b in range(cpp.num_blocks)] == py.ref


def run_seed(seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    nb, bs, ns = rng.randint(2, 40), rng.randint(1, 8), rng.randint(2, 10)
    cpp, py = _C.BlockManager(nb, bs, ns), ModelBlockManager(nb, bs, ns)
    live: set[int] = set()
    next_id = 0
    stats = {"ops": 0, "refused": 0}
    max_tokens = int(nb * bs * 1.2) + 1

    def pick_id() -> int:
        # mostly live ids, sometimes a stale / unknown one
        if live and rng.random() < 0.9:
            return rng.choice(sorted(live))
        return rng.randint(0, next_id + 2)

    for _ in range(OPS_PER_SEED):
        op = rng.choice(["alloc", "alloc", "append", "append", "fork", "free", "can"])
        if op == "alloc":
            sid = next_id if rng.random() < 0.9 else pick_id()
            n = rng.randint(0, max_tokens) if rng.random() < 0.1 else rng.randint(1, 3 * bs)
            assert cpp.can_allocate(n) == py.can_allocate(n)
            a, b = outcome(cpp.allocate, sid, n), outcome(py.allocate, sid, n)
            if a[1] is None:
                live.add(sid)
                next_id = max(next_id, sid) + 1
        elif op == "append":
            sid, k = pick_id(), rng.choice([0, 1, 1, 1, bs, rng.randint(1, 4 * bs)])
            assert outcome(cpp.can_append, sid, k) == outcome(py.can_append, sid, k)
            a, b = outcome(cpp.append, sid, k), outcome(py.append, sid, k)
        elif op == "fork":
            parent = pick_id()
            child = next_id if rng.random() < 0.9 else pick_id()
            # half the forks take a prefix of the parent (maybe out of range: an error)
            n = None if rng.random() < 0.5 else rng.randint(0, 3 * bs)
            assert outcome(cpp.can_fork, parent, n) == outcome(py.can_fork, parent, n)
            a, b = outcome(cpp.fork, parent, child, n), outcome(py.fork, parent, child, n)
            if a[1] is None:
                live.add(child)
                next_id = max(next_id, child) + 1
        elif op == "free":
            sid = pick_id()
            a, b = outcome(cpp.free, sid), outcome(py.free, sid)
            if a[1] is None:
                live.discard(sid)
        else:
            n = rng.randint(0, max_tokens)
            a, b = (cpp.can_allocate(n), None), (py.can_allocate(n), None)
        assert a == b, f"seed {seed}: {op} diverged: C++ {a} vs model {b}"
        stats["ops"] += 1
        stats["refused"] += a[1] is not None or a[0] is False
        cpp.check_integrity()
        py.check_integrity()
        check_invariants(cpp, live)
        compare_state(cpp, py, live)
    for sid in sorted(live):  # everything frees back to the initial state
        cpp.free(sid)
        py.free(sid)
    assert cpp.num_free_blocks() == nb - 1 and cpp.num_free_state_slots() == ns - 1
    assert cpp.usage() == 0.0
    return stats


def test_differential_random_ops():
    total = {"ops": 0, "refused": 0}
    for seed in range(NUM_SEEDS):
        for k, v in run_seed(seed).items():
            total[k] += v
    assert total["ops"] >= 10_000
    assert total["refused"] > 500  # refusals and errors were exercised, not only the happy path


def test_lifo_order_and_sentinels():
    bm = _C.BlockManager(num_blocks=6, block_size=4, num_state_slots=4)
    bm.allocate(seq_id=10, num_tokens=5)
    assert bm.block_table(10) == [1, 2] and bm.state_slot(10) == 1
    bm.allocate(11, 1)
    assert bm.block_table(11) == [3] and bm.state_slot(11) == 2
    bm.free(10)
    bm.allocate(12, 8)  # LIFO: the freed table comes back in its original order
    assert bm.block_table(12) == [1, 2] and bm.state_slot(12) == 1
    assert bm.ref_count(0) == 0


def test_reserve_block_and_append():
    bm = _C.BlockManager(num_blocks=4, block_size=2, num_state_slots=4)  # 3 usable
    assert not bm.can_allocate(6)  # would use the last free block
    bm.allocate(1, 4)  # 2 blocks, 1 left in reserve
    assert not bm.can_allocate(1)
    assert bm.can_append(1, 1)
    assert bm.append(1, 1) == [3]  # decode may take the reserve
    assert bm.append(1, 1) == []  # fills block 3, no new block
    assert not bm.can_append(1, 1)
    with pytest.raises(RuntimeError, match="append: not enough free blocks"):
        bm.append(1, 1)


def test_fork_shares_full_blocks_and_copies_partial():
    bm = _C.BlockManager(num_blocks=10, block_size=4, num_state_slots=4)
    bm.allocate(1, 10)  # blocks [1, 2, 3], last holds 2 tokens
    block_copy, slot_copy = bm.fork(parent_id=1, child_id=2)
    assert block_copy == (3, 4) and slot_copy == (1, 2)
    assert bm.block_table(2) == [1, 2, 4]
    assert [bm.ref_count(b) for b in (1, 2, 3, 4)] == [2, 2, 1, 1]
    bm.append(1, 2)  # parent fills its block 3; child's copy is untouched
    block_copy, slot_copy = bm.fork(1, 3)  # full last block: nothing to copy
    assert block_copy is None and slot_copy == (1, 3)
    assert bm.ref_count(3) == 2
    bm.free(1)
    assert [bm.ref_count(b) for b in (1, 2, 3, 4)] == [2, 2, 1, 1]
    bm.free(2)
    bm.free(3)
    assert bm.num_free_blocks() == 9 and bm.usage() == 0.0
    bm.check_integrity()


def test_errors_have_clear_messages():
    bm = _C.BlockManager(num_blocks=5, block_size=4, num_state_slots=3)
    bm.allocate(1, 4)
    with pytest.raises(ValueError, match="allocate: sequence id 1 already exists"):
        bm.allocate(1, 4)
    bm.free(1)
    with pytest.raises(ValueError, match="free: unknown sequence id 1 .*already freed"):
        bm.free(1)  # double free
    with pytest.raises(ValueError, match="free: unknown sequence id 99"):
        bm.free(99)
    with pytest.raises(ValueError, match="longer than the cache"):
        bm.allocate(2, 4 * 4 + 1)
    with pytest.raises(ValueError, match="num_tokens must be >= 1"):
        bm.allocate(2, 0)
    bm.allocate(2, 12)  # 3 of 4 usable blocks, the last one is the reserve
    with pytest.raises(RuntimeError, match="allocate: not enough free blocks .*reserve"):
        bm.allocate(3, 1)
    bm.append(2, 1)  # takes the reserve
    bm.free(2)
    bm.allocate(3, 1)
    bm.allocate(4, 1)
    with pytest.raises(RuntimeError, match="no free state slot"):
        bm.allocate(5, 1)  # only 2 usable state slots
    with pytest.raises(ValueError, match="fork: child sequence id 4 already exists"):
        bm.fork(3, 4)
    with pytest.raises(ValueError, match="fork: unknown sequence id 7"):
        bm.fork(7, 8)
    with pytest.raises(RuntimeError, match="fork: not enough free blocks or state slots"):
        bm.fork(3, 9)
    with pytest.raises(ValueError, match="append: unknown sequence id 42"):
        bm.append(42)
    with pytest.raises(ValueError, match="ref_count: block id 5 outside"):
        bm.ref_count(5)
    with pytest.raises(ValueError, match="block 0 is a reserved sentinel"):
        _C.BlockManager(num_blocks=1, block_size=4, num_state_slots=3)
    with pytest.raises(ValueError, match="slot 0 is reserved"):
        _C.BlockManager(num_blocks=4, block_size=4, num_state_slots=1)
    bm.check_integrity()


def test_allocation_is_all_or_nothing():
    bm = _C.BlockManager(num_blocks=10, block_size=1, num_state_slots=2)  # one usable slot
    bm.allocate(1, 1)
    before = (bm.num_free_blocks(), bm.num_free_state_slots())
    with pytest.raises(RuntimeError, match="no free state slot"):
        bm.allocate(2, 3)  # blocks are available but the slot is not: nothing is taken
    assert (bm.num_free_blocks(), bm.num_free_state_slots()) == before
    assert 2 not in bm
    bm.check_integrity()


def test_fork_prefix_shares_only_valid_tokens():
    bm = _C.BlockManager(num_blocks=12, block_size=4, num_state_slots=4)
    bm.allocate(1, 16)  # [1, 2, 3, 4]; say only 6 tokens are valid KV, the rest is room
    block_copy, slot_copy = bm.fork(1, 2, num_tokens=6)
    assert block_copy == (2, 5) and slot_copy == (1, 2)
    assert bm.block_table(2) == [1, 5] and bm.num_tokens(2) == 6
    assert [bm.ref_count(b) for b in (1, 2, 3, 4, 5)] == [2, 1, 1, 1, 1]
    assert bm.fork(1, 3, num_tokens=8) == (None, (1, 3))  # block-aligned: nothing to copy
    assert bm.block_table(3) == [1, 2]
    with pytest.raises(ValueError, match=r"fork: num_tokens must be in \[1, 16\]"):
        bm.fork(1, 4, num_tokens=17)
    assert not bm.can_fork(1, 0)
    bm.check_integrity()
