"""Pure-Python model of deepinfer._C.BlockManager: the oracle for the differential test.

Same decision rules as csrc/block_manager.cc: block 0 and state slot 0 are never handed out;
allocate/fork keep RESERVE free blocks (append may use them); fork shares full blocks and copies
a partial last block; free lists are LIFO stacks (initial top = 1, free() pushes last-to-first).
Caller mistakes raise ValueError, running out of capacity raises RuntimeError.
"""

from dataclasses import dataclass, field

RESERVE = 1


@dataclass
class Seq:
    blocks: list[int] = field(default_factory=list)
    slot: int = 0
    num_tokens: int = 0


class ModelBlockManager:
    def __init__(self, num_blocks: int, block_size: int, num_state_slots: int) -> None:
        self.num_blocks, self.block_size, self.num_state_slots = (
            num_blocks,
            block_size,
            num_state_slots,
        )
        self.ref = [0] * num_blocks
        self.free_blocks = list(range(num_blocks - 1, 0, -1))  # pop() hands out 1 first
        self.free_slots = list(range(num_state_slots - 1, 0, -1))
        self.seqs: dict[int, Seq] = {}

    def _blocks_for(self, n: int) -> int:
        return -(-n // self.block_size)

    def _get(self, seq_id: int) -> Seq:
        if seq_id not in self.seqs:
            raise ValueError(f"unknown sequence id {seq_id}")
        return self.seqs[seq_id]

    def _pop_block(self) -> int:
        b = self.free_blocks.pop()
        self.ref[b] = 1
        return b

    def can_allocate(self, n: int) -> bool:
        return (
            n >= 1
            and self._blocks_for(n) + RESERVE <= len(self.free_blocks)
            and bool(self.free_slots)
        )

    def allocate(self, seq_id: int, n: int) -> None:
        if seq_id in self.seqs:
            raise ValueError(f"sequence id {seq_id} already exists")
        if n < 1:
            raise ValueError("num_tokens must be >= 1")
        need = self._blocks_for(n)
        if need + RESERVE > self.num_blocks - 1:
            raise ValueError("longer than the cache")
        if need + RESERVE > len(self.free_blocks) or not self.free_slots:
            raise RuntimeError("out of blocks or state slots")
        blocks = [self._pop_block() for _ in range(need)]
        self.seqs[seq_id] = Seq(blocks, self.free_slots.pop(), n)

    def _append_need(self, seq: Seq, k: int) -> int:
        return self._blocks_for(seq.num_tokens + k) - len(seq.blocks)

    def can_append(self, seq_id: int, k: int = 1) -> bool:
        seq = self._get(seq_id)
        return k >= 0 and self._append_need(seq, k) <= len(self.free_blocks)

    def append(self, seq_id: int, k: int = 1) -> list[int]:
        seq = self._get(seq_id)
        if k < 0:
            raise ValueError("num_new_tokens must be >= 0")
        need = self._append_need(seq, k)
        if need > len(self.free_blocks):
            raise RuntimeError("out of blocks")
        added = [self._pop_block() for _ in range(need)]
        seq.blocks += added
        seq.num_tokens += k
        return added

    def can_fork(self, parent_id: int, n: int | None = None) -> bool:
        parent = self._get(parent_id)
        n = parent.num_tokens if n is None else n
        if not 1 <= n <= parent.num_tokens:
            return False
        need = 1 if n % self.block_size else 0
        return need + RESERVE <= len(self.free_blocks) and bool(self.free_slots)

    def fork(self, parent_id: int, child_id: int, n: int | None = None):
        """Forks the first n tokens (default all): full blocks shared, a partial one copied."""
        parent = self._get(parent_id)
        n = parent.num_tokens if n is None else n
        if child_id in self.seqs:
            raise ValueError(f"child sequence id {child_id} already exists")
        if not 1 <= n <= parent.num_tokens:
            raise ValueError("fork: num_tokens out of range")
        if not self.can_fork(parent_id, n):
            raise RuntimeError("out of blocks or state slots")
        blocks = parent.blocks[: self._blocks_for(n)]
        partial = n % self.block_size != 0
        for b in blocks[: len(blocks) - partial]:
            self.ref[b] += 1
        block_copy = None
        if partial:
            src = blocks[-1]
            blocks[-1] = self._pop_block()
            block_copy = (src, blocks[-1])
        child = Seq(blocks, self.free_slots.pop(), n)
        self.seqs[child_id] = child
        return block_copy, (parent.slot, child.slot)

    def free(self, seq_id: int) -> None:
        seq = self._get(seq_id)
        for b in reversed(seq.blocks):
            assert self.ref[b] > 0, f"over-release of block {b}"
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free_blocks.append(b)
        self.free_slots.append(seq.slot)
        del self.seqs[seq_id]

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._get(seq_id).blocks)

    def state_slot(self, seq_id: int) -> int:
        return self._get(seq_id).slot

    def usage(self) -> float:
        usable = self.num_blocks - 1
        return (usable - len(self.free_blocks)) / usable

    def check_integrity(self) -> None:
        owners = [0] * self.num_blocks
        for seq in self.seqs.values():
            assert len(seq.blocks) == self._blocks_for(seq.num_tokens)
            for b in seq.blocks:
                assert 0 < b < self.num_blocks, "block 0 (or out of range) owned"
                owners[b] += 1
        assert owners == self.ref, "reference counts != number of tables containing the block"
        assert len(set(self.free_blocks)) == len(self.free_blocks), "duplicate in free list"
        assert all(self.ref[b] == 0 for b in self.free_blocks), "free block with refcount > 0"
        used = sum(1 for r in self.ref if r > 0)
        assert used + len(self.free_blocks) == self.num_blocks - 1, "free + used != usable"
        slots = [s.slot for s in self.seqs.values()] + self.free_slots
        assert sorted(slots) == list(range(1, self.num_state_slots)), "state slots leaked/shared"
