"""Load plans (paged and ring) applied to a fake numpy cache against a direct computation."""

import random

import numpy as np
import pytest
import torch

from deepinfer import _C

D = 3  # feature width of the fake cache rows


def apply_plan(segs: np.ndarray, cache: np.ndarray, view_len: int) -> np.ndarray:
    """What the load kernel does; also asserts every destination row is written exactly once."""
    out = np.full((view_len, D), -7, dtype=np.int64)
    writes = np.zeros(view_len, dtype=np.int64)
    for block, begin, end, dst in segs.tolist():
        n = end - begin
        writes[dst : dst + n] += 1
        out[dst : dst + n] = 0 if block == _C.ZERO_FILL_BLOCK else cache[block, begin:end]
    assert (writes == 1).all(), "destination not covered exactly once"
    return out


def token_row(t: int) -> np.ndarray:
    return np.array([t + 1, 1000 + t, -(t + 1)])  # never zero, so zero-fill is visible


def test_paged_random_layouts():
    rng = random.Random(0)
    for _ in range(1500):
        bs = rng.randint(1, 8)
        num_blocks = rng.randint(2, 24)
        n = rng.randint(0, (num_blocks - 1) * bs)
        view_len = rng.choice([n, n + rng.randint(0, 3 * bs), rng.randint(0, n + 1)])
        table = rng.sample(range(1, num_blocks), -(-n // bs))
        cache = np.zeros((num_blocks, bs, D), dtype=np.int64)
        for t in range(n):
            cache[table[t // bs], t % bs] = token_row(t)
        buf = np.full((_C.max_paged_segments(view_len, bs), 4), 12345, dtype=np.int32)
        k = _C.build_paged_load_plan(buf, table, block_size=bs, num_tokens=n, view_len=view_len)
        _C.validate_segments(buf, view_len, bs, num_segments=k)
        assert (np.diff(buf[:k, 3]) > 0).all()  # increasing destination order
        expect = np.zeros((view_len, D), dtype=np.int64)
        for t in range(min(n, view_len)):
            expect[t] = token_row(t)
        np.testing.assert_array_equal(apply_plan(buf[:k], cache, view_len), expect)


def test_ring_random_layouts_wrap_and_unwritten():
    rng = random.Random(1)
    seen = set()
    for _ in range(1500):
        window = rng.randint(1, 12)
        n = rng.randint(0, 4 * window)
        ring_block = rng.randint(0, 5)
        cache = np.zeros((6, window, D), dtype=np.int64)
        for p in range(n):  # the ring is written token by token, overwriting the oldest
            cache[ring_block, p % window] = token_row(p)
        buf = np.zeros((_C.MAX_RING_SEGMENTS, 4), dtype=np.int32)
        k = _C.build_ring_load_plan(buf, ring_block_id=ring_block, window=window, num_tokens=n)
        _C.validate_segments(buf, window, window, num_segments=k)
        expect = np.zeros((window, D), dtype=np.int64)
        for i, p in enumerate(range(max(0, n - window), n)):  # oldest first
            expect[i] = token_row(p)
        np.testing.assert_array_equal(apply_plan(buf[:k], cache, window), expect)
        seen.add("wrapped" if n > window and n % window else "unwritten" if n < window else "full")
    assert seen == {"wrapped", "unwritten", "full"}


def test_ring_wrap_gives_two_segments():
    buf = np.zeros((2, 4), dtype=np.int32)
    assert _C.build_ring_load_plan(buf, ring_block_id=5, window=4, num_tokens=6) == 2
    assert buf.tolist() == [[5, 2, 4, 0], [5, 0, 2, 2]]
    assert _C.build_ring_load_plan(buf, 5, 4, 2) == 2
    assert buf.tolist() == [[5, 0, 2, 0], [-1, 0, 2, 2]]


def test_torch_tensor_buffer_is_written_in_place():
    t = torch.zeros(8, dtype=torch.int32)  # flat buffers work too: 4 ints per segment
    k = _C.build_paged_load_plan(t, [7], block_size=4, num_tokens=3, view_len=4)
    assert k == 2 and t.tolist() == [7, 0, 3, 0, -1, 0, 1, 3]


def test_load_plan_errors():
    small = np.zeros((1, 4), dtype=np.int32)
    with pytest.raises(ValueError, match="output buffer holds 1 segments but the plan needs 2"):
        _C.build_paged_load_plan(small, [1], block_size=4, num_tokens=2, view_len=4)
    with pytest.raises(ValueError, match="needs 2"):
        _C.build_ring_load_plan(small, 1, window=4, num_tokens=6)
    buf = np.zeros((4, 4), dtype=np.int32)
    with pytest.raises(ValueError, match="5 tokens need 2 blocks but the block table has 1"):
        _C.build_paged_load_plan(buf, [1], block_size=4, num_tokens=5, view_len=5)
    with pytest.raises(ValueError, match="dtype must be int32"):
        _C.build_paged_load_plan(buf.astype(np.int64), [1], 4, 1, 1)
    with pytest.raises(ValueError, match="must be writable"):
        buf.flags.writeable = False
        _C.build_paged_load_plan(buf, [1], 4, 1, 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        _C.build_paged_load_plan(np.zeros((4, 8), dtype=np.int32)[:, ::2], [1], 4, 1, 1)
    with pytest.raises(ValueError, match="multiple of 4"):
        _C.build_paged_load_plan(np.zeros(6, dtype=np.int32), [1], 4, 1, 1)
    with pytest.raises(ValueError, match="window must be"):
        _C.build_ring_load_plan(buf.copy(), 1, window=0, num_tokens=0)


@pytest.mark.parametrize(
    ("segs", "message"),
    [
        ([[1, 0, 4, 0], [2, 0, 4, 3]], "destination overlap at row 3"),
        ([[1, 0, 4, 0], [2, 0, 3, 5]], r"destination gap: rows \[4, 5\)"),
        ([[1, 0, 4, 0]], r"destination gap: rows \[4, 8\)"),
        ([[1, 2, 6, 0], [2, 0, 4, 4]], "runs past the block"),
        ([[1, 3, 3, 0]], "empty"),
        ([[-2, 0, 8, 0]], "neither a block id nor -1"),
        ([[-1, 1, 9, 0]], "zero-fill segment must have src_begin 0"),
        ([[1, 0, 4, 0], [2, 0, 4, 6]], "outside the view"),
    ],
)
def test_validate_segments_rejects(segs, message):
    with pytest.raises(ValueError, match=message):
        _C.validate_segments(np.array(segs, dtype=np.int32), view_len=8, block_size=4)


def test_validate_segments_accepts_any_order():
    segs = np.array([[-1, 0, 5, 3], [9, 1, 4, 0]], dtype=np.int32)
    _C.validate_segments(segs, view_len=8, block_size=4)
