"""Pure-Python model of deepinfer._C.Scheduler: the oracle for the differential tests.

Same rules as csrc/include/deepinfer/scheduler.h (read the contract there), written for reading:
two-stage DP vote, strict-FIFO chunked prefill with image-span protection and a block promise
for started prefills, decode sorted by (outputs, seq_id) from the short end, preemption from the
long end by recompute (structured output finishes as "preempted"), epochs from one counter,
deferred commits that drop stale rows. Block accounting reuses ModelBlockManager.
"""

from collections import deque
from dataclasses import dataclass, field, replace

from block_manager_model import RESERVE, ModelBlockManager

NORMAL, PROMPT, COMPLETION = 0, 1, 2
DECODE, PREFILL = 0, 1


@dataclass
class Config:
    block_size: int
    num_blocks: int
    num_state_slots: int
    max_model_len: int
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    prefill_chunk_size: int = 8192
    mode: int = NORMAL
    prefill_watermark: float = 0.90
    vote_interval_steps: int = 0
    lookahead_tokens: int = 0
    decode_buckets: list[int] = field(default_factory=list)
    prefill_token_buckets: list[int] = field(default_factory=list)


@dataclass
class Req:
    seq_id: int
    prompt_len: int
    max_new_tokens: int
    image_spans: list[tuple[int, int]]
    structured_output: bool
    sampling: tuple  # (temperature, top_p, top_k, min_p, seed)
    epoch: int
    state: str = "waiting"
    num_computed: int = 0
    num_output: int = 0
    num_pending: int = 0

    def target(self) -> int:
        return self.prompt_len + self.num_output


@dataclass
class Plan:
    step_id: int
    phase: int
    rows: list[tuple[int, int, int, int, bool]]  # seq_id, epoch, start_pos, num_tokens, samples
    bucket: int
    num_padded_rows: int
    block_tables: list[list[int]]  # num_padded_rows x width, padded with block 0
    state_slots: list[int]
    preempted: list[int]
    block_copies: list[tuple[int, int]] = field(default_factory=list)
    slot_copies: list[tuple[int, int]] = field(default_factory=list)


class ModelScheduler:
    def __init__(self, c: Config) -> None:
        self.c = c
        self.bm = ModelBlockManager(c.num_blocks, c.block_size, c.num_state_slots)
        self.width = min(self._blocks(c.max_model_len + c.lookahead_tokens), c.num_blocks - 1)
        self.reqs: dict[int, Req] = {}
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.running: list[int] = []
        self.next_epoch = self.next_step = 0
        self.pending = False
        self.admissions: list[tuple[int, int, bool]] = []
        self.in_flight: dict[int, tuple[int, list[tuple[int, int, bool]]]] = {}
        self.finished: list[tuple[int, str]] = []
        self.pending_copies: list[tuple[int, int, tuple | None, tuple]] = []

    def _blocks(self, n: int) -> int:
        return -(-n // self.c.block_size)

    def _get(self, seq_id: int, op: str) -> Req:
        if seq_id not in self.reqs:
            raise ValueError(f"{op}: unknown sequence id {seq_id}")
        return self.reqs[seq_id]

    def _no_pending(self, op: str) -> None:
        if self.pending:
            raise ValueError(f"{op}: a step is between apply_vote1 and finish_step")

    # --- requests ---
    def add_request(
        self,
        seq_id,
        prompt_len,
        max_new_tokens,
        image_spans=(),
        structured_output=False,
        sampling=(1.0, 1.0, 0, 0.0, -1),
    ) -> None:
        self._no_pending("add_request")
        c = self.c
        if seq_id in self.reqs:
            raise ValueError("already exists")
        if prompt_len < 1 or max_new_tokens < 1:
            raise ValueError("prompt_len and max_new_tokens must be >= 1")
        if prompt_len + max_new_tokens > c.max_model_len:
            raise ValueError("longer than max_model_len")
        room = prompt_len + max_new_tokens + c.lookahead_tokens
        if self._blocks(room) + RESERVE > c.num_blocks - 1:
            raise ValueError("can never fit in the cache")
        prev = 0
        for b, e in image_spans:
            if b < prev or e <= b or e > prompt_len:
                raise ValueError("bad image span")
            if e - b > c.max_num_batched_tokens:
                raise ValueError("image span exceeds max_num_batched_tokens")
            prev = e
        t, p, k, m, s = sampling
        if not (t >= 0 and 0 < p <= 1 and k >= 0 and 0 <= m <= 1 and s >= -1):
            raise ValueError("bad sampling params")
        self.reqs[seq_id] = Req(
            seq_id,
            prompt_len,
            max_new_tokens,
            list(image_spans),
            structured_output,
            tuple(sampling),
            self.next_epoch,
        )
        self.next_epoch += 1
        self.waiting.append(seq_id)

    def _release(self, seq_id: int) -> None:
        r = self.reqs.pop(seq_id)
        {"waiting": self.waiting, "prefilling": self.prefilling, "running": self.running}[
            r.state
        ].remove(seq_id)
        if seq_id in self.bm.seqs:
            self.bm.free(seq_id)

    def fork(self, parent_id: int, child_id: int, seed: int | None = None) -> None:
        self._no_pending("fork")
        parent = self._get(parent_id, "fork")
        if child_id in self.reqs:
            raise ValueError("fork: child already exists")
        if parent.state != "running" or parent.num_pending:
            raise ValueError("fork: parent must be decoding with no uncommitted step")
        if len(self.running) + len(self.prefilling) >= self.c.max_num_seqs:
            raise RuntimeError("fork: max_num_seqs live sequences")
        sampling = parent.sampling if seed is None else (*parent.sampling[:4], seed)
        if sampling[4] < -1:
            raise ValueError("bad seed")
        kv, have = parent.num_computed, self.bm.seqs[parent_id].num_tokens
        if kv > have:  # covered by the table already: allocates no block
            self.bm.append(parent_id, kv - have)
        block_copy, slot_copy = self.bm.fork(parent_id, child_id, kv)
        child = replace(parent, seq_id=child_id, sampling=sampling, epoch=self.next_epoch)
        self.next_epoch += 1
        self.pending_copies.append((child_id, child.epoch, block_copy, slot_copy))
        self.reqs[child_id] = child
        self.running.append(child_id)

    def abort(self, seq_id: int) -> None:
        self._no_pending("abort")
        self._get(seq_id, "abort")
        self._release(seq_id)

    def finish(self, seq_id: int) -> None:
        self._no_pending("finish")
        self._get(seq_id, "finish")
        self._release(seq_id)

    # --- the vote state machine ---
    def vote1_local(self) -> int:
        return int(bool(self.waiting or self.prefilling))

    def _chunk_end(self, r: Req, budget: int) -> int:
        start = r.num_computed
        n = min(r.target() - start, self.c.prefill_chunk_size, budget)
        if n <= 0:
            return start
        end = start + n
        for b, e in r.image_spans:
            if b >= end:
                break
            if b < end < e:
                if b > start:
                    return b  # end the chunk before the span
                return e if e - start <= budget else start  # span starts the chunk
        return end

    def _admit_tentatively(self) -> None:
        budget = self.c.max_num_batched_tokens
        free_blocks, free_slots = len(self.bm.free_blocks), len(self.bm.free_slots)
        promised = 0
        for sid in self.prefilling:
            r = self.reqs[sid]
            promised += max(0, self._blocks(r.target()) - self._blocks(r.num_computed))
        live = len(self.running) + len(self.prefilling)
        allow_new = self.bm.usage() <= self.c.prefill_watermark
        for sid in self.prefilling:
            r = self.reqs[sid]
            end = self._chunk_end(r, budget)
            if end <= r.num_computed:
                return
            need = self._blocks(end) - self._blocks(r.num_computed)
            if need + RESERVE > free_blocks:
                return
            self.admissions.append((sid, end, False))
            budget -= end - r.num_computed
            free_blocks -= need
            promised -= need
        if not allow_new:
            return
        for sid in self.waiting:
            r = self.reqs[sid]
            if live >= self.c.max_num_seqs or free_slots < 1:
                return
            end = self._chunk_end(r, budget)
            if end <= r.num_computed:
                return
            whole = self._blocks(r.target())
            if whole + RESERVE + promised > free_blocks:
                return
            self.admissions.append((sid, end, True))
            budget -= end
            free_blocks -= self._blocks(end)
            promised += whole - self._blocks(end)
            free_slots -= 1
            live += 1

    def apply_vote1(self, all_flag: bool, any_flag: bool) -> int:
        self._no_pending("apply_vote1")
        self.admissions = []
        n = self.c.vote_interval_steps
        if self.c.mode == PROMPT:
            want = True
        elif self.c.mode == COMPLETION:
            want = False
        else:
            all_point = n > 0 and self.next_step % n == n - 1
            want = bool(all_flag) if all_point else bool(any_flag)
        if want:
            self._admit_tentatively()
        self.pending = True
        return int(bool(self.admissions))

    def finish_step(self, any_admitted: bool) -> Plan:
        if not self.pending:
            raise ValueError("finish_step: no step in progress")
        if self.admissions and not any_admitted and self.c.mode == NORMAL:
            raise ValueError("finish_step: any_admitted is false but this rank admitted")
        phase = {PROMPT: PREFILL, COMPLETION: DECODE}.get(
            self.c.mode, PREFILL if any_admitted else DECODE
        )
        self.pending = False
        self.rows: list[tuple[int, int, int, int, bool]] = []
        self.preempted: list[int] = []
        if phase == PREFILL:
            self._build_prefill()
        else:
            self.admissions = []
            self._build_decode()
        step_id = self.next_step
        self.next_step += 1
        self.in_flight[step_id] = (phase, [(s, e, smp) for s, e, _, _, smp in self.rows])
        return self._plan(step_id, phase)

    def schedule(self, allreduce_max=None) -> Plan:
        if self.c.mode != NORMAL:
            return self.finish_step(self.apply_vote1(False, False) != 0)
        v = self.vote1_local()
        any_, all_ = v, v
        if allreduce_max is not None:
            r = allreduce_max([v, 1 - v])
            any_, all_ = r[0], 1 - r[1]
        a = self.apply_vote1(bool(all_), bool(any_))
        if allreduce_max is not None:
            a = allreduce_max([a])[0]
        return self.finish_step(bool(a))

    # --- building batches ---
    def _row(self, r: Req, start: int, n: int, samples: bool) -> None:
        self.rows.append((r.seq_id, r.epoch, start, n, samples))

    def _build_prefill(self) -> None:
        for sid, end, is_new in self.admissions:
            r = self.reqs[sid]
            start = r.num_computed
            if is_new:
                assert self.waiting.popleft() == sid
                self.bm.allocate(sid, end)
                r.state = "prefilling"
                self.prefilling.append(sid)
            else:
                self.bm.append(sid, end - start)
            r.num_computed = end
            last = end == r.target()
            if last:
                r.num_pending += 1
                r.state = "running"
                self.prefilling.remove(sid)
                self.running.append(sid)
            self._row(r, start, end - start, last)
        self.admissions = []

    def _preempt(self, r: Req) -> None:
        self.preempted.append(r.seq_id)
        if r.structured_output:
            self.finished.append((r.seq_id, "preempted"))
            self._release(r.seq_id)
            return
        (self.running if r.state == "running" else self.prefilling).remove(r.seq_id)
        self.bm.free(r.seq_id)
        r.state, r.num_computed, r.num_pending = "waiting", 0, 0
        r.epoch = self.next_epoch
        self.next_epoch += 1
        self.waiting.appendleft(r.seq_id)

    def _build_decode(self) -> None:
        c, bm = self.c, self.bm
        if c.mode == COMPLETION:
            while self.waiting and len(self.running) + len(self.prefilling) < c.max_num_seqs:
                r = self.reqs[self.waiting[0]]
                if not bm.can_allocate(r.target()):
                    break
                bm.allocate(r.seq_id, r.target())
                r.num_computed, r.state = r.target(), "running"
                self.running.append(self.waiting.popleft())
        order = sorted((self.reqs[s] for s in self.running), key=lambda r: (r.num_output, r.seq_id))
        lo, hi = 0, len(order)
        while lo < hi:
            if len(self.rows) >= c.max_num_seqs or len(self.rows) + 1 > c.max_num_batched_tokens:
                break
            r = order[lo]
            if r.num_output + r.num_pending >= r.max_new_tokens:
                lo += 1  # its last token is in flight
                continue
            room = r.num_computed + 1 + c.lookahead_tokens
            have = bm.seqs[r.seq_id].num_tokens
            need = self._blocks(room) - self._blocks(have)
            while need > len(bm.free_blocks) and hi - 1 > lo:
                hi -= 1
                self._preempt(order[hi])
            while need > len(bm.free_blocks) and not self.rows and self.prefilling:
                self._preempt(self.reqs[self.prefilling[-1]])
            if need > len(bm.free_blocks):
                lo += 1
                continue
            if need > 0:  # grow to whole blocks
                bm.append(r.seq_id, self._blocks(room) * c.block_size - have)
            r.num_computed += 1
            r.num_pending += 1
            self._row(r, r.num_computed - 1, 1, True)
            lo += 1

    def _plan(self, step_id: int, phase: int) -> Plan:
        c = self.c
        if phase == DECODE:
            bucket = next((b for b in c.decode_buckets if b >= len(self.rows)), -1)
            padded = bucket if bucket >= 0 else len(self.rows)
        else:
            tokens = sum(n for _, _, _, n, _ in self.rows)
            bucket = next((b for b in c.prefill_token_buckets if b >= tokens), -1)
            padded = len(self.rows)
        tables, slots = [], []
        for i in range(padded):
            if i < len(self.rows):
                sid = self.rows[i][0]
                t = self.bm.block_table(sid)
                tables.append(t + [0] * (self.width - len(t)))
                slots.append(self.bm.state_slot(sid))
            else:
                tables.append([0] * self.width)
                slots.append(0)
        block_copies, slot_copies = [], []
        for child, epoch, block_copy, slot_copy in self.pending_copies:
            if child in self.reqs and self.reqs[child].epoch == epoch:  # else gone since the fork
                block_copies += [block_copy] if block_copy else []
                slot_copies.append(slot_copy)
        self.pending_copies = []
        return Plan(
            step_id,
            phase,
            list(self.rows),
            bucket,
            padded,
            tables,
            slots,
            list(self.preempted),
            block_copies,
            slot_copies,
        )

    # --- results ---
    def commit(self, step_id: int, num_accepted, finished=None) -> list[int]:
        self._no_pending("commit")
        if step_id not in self.in_flight:
            raise ValueError(f"commit: unknown step id {step_id}")
        phase, rows = self.in_flight[step_id]
        if len(num_accepted) != len(rows):
            raise ValueError("commit: wrong number of rows")
        max_accept = 1 if phase == PREFILL else 1 + self.c.lookahead_tokens
        live = [s in self.reqs and self.reqs[s].epoch == e for s, e, _ in rows]
        for (_, _, smp), ok, a in zip(rows, live, num_accepted, strict=True):
            if ok and smp and not 1 <= a <= max_accept:
                raise ValueError("commit: accepted tokens out of range")
        dropped = []
        for i, (sid, epoch, smp) in enumerate(rows):
            r = self.reqs.get(sid)
            if r is None or r.epoch != epoch:
                dropped.append(i)
                continue
            if not smp:
                continue
            a = int(num_accepted[i])
            r.num_output += a
            r.num_computed += a - 1
            r.num_pending -= 1
            if finished is not None and finished[i]:
                reason = "stop"
            elif r.num_output >= r.max_new_tokens:
                reason = "length"
            elif self.c.mode == PROMPT:
                reason = "prompt_done"
            else:
                continue
            self.finished.append((sid, reason))
            self._release(sid)
        del self.in_flight[step_id]
        return dropped

    def take_finished(self) -> list[tuple[int, str]]:
        out, self.finished = self.finished, []
        return out

    # --- sample preparation ---
    def prepare_sample(self, seq_ids, epochs, is_prefill, query_lens, seq_lens):
        """Returns (temperature, top_p, top_k, min_p, seeds, offsets, logits_index, num_stale)."""
        n = len(seq_ids)
        if any(bool(p) != bool(is_prefill[0]) for p in is_prefill):
            raise ValueError("prepare_sample: batch mixes prefill and decode rows")
        for i in range(n):
            q, ln = int(query_lens[i]), int(seq_lens[i])
            if q < 1 or ln < q or ln > self.c.max_model_len:
                raise ValueError("prepare_sample: bad lengths")
            r = self.reqs.get(int(seq_ids[i]))
            if r is not None and r.epoch == epochs[i]:
                covered = len(self.bm.seqs[r.seq_id].blocks) * self.c.block_size
                if ln > covered:
                    raise ValueError("prepare_sample: seq_len beyond the block table")
        cols: list[list] = [[] for _ in range(7)]
        stale = flat = 0
        for i in range(n):
            r = self.reqs.get(int(seq_ids[i]))
            live = r is not None and r.epoch == epochs[i]
            stale += not live
            params = r.sampling if live else (1.0, 1.0, 0, 0.0, -1)
            flat += int(query_lens[i])
            for col, v in zip(cols, (*params, int(seq_lens[i]), flat - 1), strict=True):
                col.append(v)
        return (*cols, stale)
